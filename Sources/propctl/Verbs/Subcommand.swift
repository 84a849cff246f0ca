import CommandLineKit
/// One propctl subcommand's behaviour; its syntax lives in ``PropctlSpec``.
protocol Subcommand: Sendable {
    /// Runs the command; output goes through ``Output``.
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure)
}

/// The implementation of each subcommand in ``PropctlSpec``, by name.
enum Subcommands {
    static let all: [String: any Subcommand.Type] = [
        "get": GetVerb.self,
        "set": SetVerb.self,
        "reset": ResetVerb.self,
        "list": ListVerb.self,
        "watch": WatchVerb.self,
        "create": CreateVerb.self,
        "delete": DeleteVerb.self,
        "override": OverrideVerb.self,
        "bind": BindVerb.self,
        "bindings": BindingsVerb.self,
        "unbind": UnbindVerb.self,
        "history": HistoryVerb.self,
        "blame": BlameVerb.self,
        "revert": RevertVerb.self,
        "dump": DumpVerb.self,
        "load": LoadVerb.self,
        "status": StatusVerb.self,
        "reload": ReloadVerb.self,
        "lock": LockVerb.self,
        "unlock": UnlockVerb.self,
        "prune": PruneVerb.self,
        "exec": ExecVerb.self,
        "serve": ServeVerb.self,
        "cancel": CancelVerb.self,
        "create-command": CreateCommandVerb.self,
        "delete-command": DeleteCommandVerb.self,
        "describe": DescribeVerb.self,
        "codegen": CodegenVerb.self,
        "completion": CompletionVerb.self,
        "import": ImportVerb.self,
        "export": ExportVerb.self,
    ]
}
