import CommandLineKit
/// Shell completion scripts derived from a `CommandSpec` tree: the same declaration as the
/// parser and the help, so a new subcommand or option completes without anyone editing a script.
///
/// Keys are completed by asking the running daemon (`propctl list`), with the bus options found
/// on the line being completed; command keys are the keys of their `Executing` state.
struct CompletionScript: Sendable {
    /// The root of the command tree; its options are global.
    let root: CommandSpec

    /// The script for `shell` (`bash`, `zsh` or `fish`), or `nil` for another shell.
    func script(for shell: String) -> String? {
        switch shell {
        case "bash": bash()
        case "zsh": zsh()
        case "fish": fish()
        default: nil
        }
    }

    /// What a command's first positional completes to.
    enum PositionalKind: String {
        case key, command, shell, file, none
    }

    static func kind(of command: CommandSpec) -> PositionalKind {
        switch (command.name, command.positionals.first?.name) {
        case ("exec", _), ("serve", _), ("cancel", _), ("delete-command", _): .command
        case ("create-command", _), ("create", _): .none
        case ("completion", _): .shell
        case (_, "KEY"), (_, "PREFIX"): .key
        case (_, "FILE"): .file
        default: .none
        }
    }

    private func words(_ options: [OptionSpec]) -> String {
        options.flatMap { option in [option.longFlag] + (option.short.map { ["-\($0)"] } ?? []) }.joined(separator: " ")
    }

    private var valueOptions: [String] {
        let all = root.options + root.subcommands.flatMap(\.options)
        return Array(Set(all.filter(\.takesValue).flatMap { [$0.longFlag] + ($0.short.map { ["-\($0)"] } ?? []) })).sorted()
    }

    func bash() -> String {
        let name = root.name
        var cases: [String] = []
        for command in root.subcommands {
            cases.append("    \(command.name)) opts=\"\(words(command.options))\"; kind=\(Self.kind(of: command).rawValue) ;;")
        }
        return """
            # bash completion for \(name), generated from its command specification
            # (\(name) completion bash). Keys come from the running daemon.
            _\(name)_keys() { # BUS_ARGS...: every key
              command \(name) "$@" list 2>/dev/null | cut -f1
            }
            _\(name)() {
              local cur=${COMP_WORDS[COMP_CWORD]} prev=${COMP_WORDS[COMP_CWORD-1]}
              local cmd="" i bus=() opts="" kind=none
              for ((i = 1; i < COMP_CWORD; i++)); do
                case ${COMP_WORDS[i]} in
                  --system|--user) bus+=("${COMP_WORDS[i]}") ;;
                  --address) bus+=(--address "${COMP_WORDS[i+1]}"); ((i++)) ;;
                  \(valueOptions.filter { $0 != "--address" }.joined(separator: "|"))) ((i++)) ;;
                  -*) ;;
                  *) [ -z "$cmd" ] && cmd=${COMP_WORDS[i]} ;;
                esac
              done
              case $prev in
                --file|--model) COMPREPLY=($(compgen -f -- "$cur")); return ;;
                \(valueOptions.filter { $0 != "--file" }.joined(separator: "|"))) COMPREPLY=(); return ;;
              esac
              local global="\(words(root.options))"
              if [ -z "$cmd" ]; then
                if [[ $cur == -* ]]; then
                  COMPREPLY=($(compgen -W "$global" -- "$cur"))
                else
                  COMPREPLY=($(compgen -W "\(root.subcommands.map(\.name).joined(separator: " "))" -- "$cur"))
                fi
                return
              fi
              case $cmd in
            \(cases.joined(separator: "\n"))
              esac
              if [[ $cur == -* ]]; then
                COMPREPLY=($(compgen -W "$opts $global" -- "$cur"))
                return
              fi
              case $kind in
                key) COMPREPLY=($(compgen -W "$(_\(name)_keys "${bus[@]}")" -- "$cur")) ;;
                command) COMPREPLY=($(compgen -W "$(_\(name)_keys "${bus[@]}" | sed -n 's/\\.Executing$//p')" -- "$cur")) ;;
                shell) COMPREPLY=($(compgen -W "bash zsh fish" -- "$cur")) ;;
                file) COMPREPLY=($(compgen -f -- "$cur")) ;;
              esac
            }
            complete -F _\(name) \(name)
            """
    }

    /// zsh runs the bash function through its bashcompinit layer, so both shells complete alike.
    func zsh() -> String {
        """
        #compdef \(root.name)
        # zsh completion for \(root.name), generated from its command specification
        # (\(root.name) completion zsh): the bash completion, through bashcompinit.
        autoload -U +X bashcompinit && bashcompinit
        \(bash())
        """
    }

    func fish() -> String {
        let name = root.name
        func quoted(_ text: String) -> String { "'" + text.replacingAll("'", with: "\\'") + "'" }
        func option(_ option: OptionSpec, condition: String?) -> String {
            var line = "complete -c \(name)"
            if let condition { line += " -n \(quoted(condition))" }
            line += " -l \(option.long)"
            if let short = option.short { line += " -s \(short)" }
            if option.takesValue { line += option.long == "file" ? " -r -F" : " -r" }
            return line + " -d \(quoted(option.help))"
        }
        var lines = ["# fish completion for \(name), generated from its command specification (\(name) completion fish).",
                     "function __\(name)_keys",
                     "    \(name) list 2>/dev/null | string split -f1 \\t",
                     "end",
                     "complete -c \(name) -f"]
        lines += root.options.map { option($0, condition: nil) }
        let names = root.subcommands.map(\.name).joined(separator: " ")
        for command in root.subcommands {
            lines.append("complete -c \(name) -n \(quoted("not __fish_seen_subcommand_from \(names)")) -a \(command.name) -d \(quoted(command.abstract))")
            let seen = "__fish_seen_subcommand_from \(command.name)"
            lines += command.options.map { option($0, condition: seen) }
            switch Self.kind(of: command) {
            case .key: lines.append("complete -c \(name) -n \(quoted(seen)) -a '(__\(name)_keys)'")
            // A literal replace: a "$" anchor would need escaping in fish's double quotes.
            case .command: lines.append("complete -c \(name) -n \(quoted(seen)) -a '(__\(name)_keys | string replace -f .Executing \"\")'")
            case .shell: lines.append("complete -c \(name) -n \(quoted(seen)) -a 'bash zsh fish'")
            case .file: lines.append("complete -c \(name) -n \(quoted(seen)) -F")
            case .none: break
            }
        }
        return lines.joined(separator: "\n")
    }
}
