import CommandLineKit
/// `propctl completion bash|zsh|fish`: prints the script ``CompletionScript`` derives from the spec.
enum CompletionVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let shell = parsed.positional("SHELL") ?? ""
        guard let script = CompletionScript(root: PropctlSpec.root).script(for: shell) else {
            throw CommandFailure(.usage, "unknown shell '\(shell)'; expected bash, zsh or fish")
        }
        Output.line(script)
    }
}
