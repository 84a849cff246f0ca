import CommandLineKit
/// One propctl subcommand's behaviour; its syntax lives in ``PropctlSpec``.
protocol Subcommand: Sendable {
    /// Runs the command; output goes through ``Output``.
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure)
}

/// The implementation of each subcommand in ``PropctlSpec``, by name.
enum Subcommands {
    static let all: [String: any Subcommand.Type] = [
        "get": GetCommand.self,
        "set": SetCommand.self,
        "reset": ResetCommand.self,
        "list": ListCommand.self,
        "watch": WatchCommand.self,
        "create": CreateCommand.self,
        "delete": DeleteCommand.self,
        "override": OverrideCommand.self,
        "bind": BindCommand.self,
        "bindings": BindingsCommand.self,
        "unbind": UnbindCommand.self,
        "history": HistoryCommand.self,
        "blame": BlameCommand.self,
        "revert": RevertCommand.self,
        "dump": DumpCommand.self,
        "load": LoadCommand.self,
        "status": StatusCommand.self,
        "reload": ReloadCommand.self,
        "prune": PruneCommand.self,
        "exec": ExecCommand.self,
        "serve": ServeCommand.self,
        "cancel": CancelCommand.self,
        "create-command": CreateCommandCommand.self,
        "delete-command": DeleteCommandCommand.self,
        "describe": DescribeCommand.self,
        "codegen": CodegenCommand.self,
        "completion": CompletionCommand.self,
    ]
}
