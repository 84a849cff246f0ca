import CommandLineKit
/// Shell completion scripts derived from a `CommandSpec` tree: the same declaration as the
/// parser and the help, so a new subcommand, option or completion hint completes without anyone
/// editing a script.
///
/// Each positional and each option value completes what its spec's `CompletionHint` says:
/// keys (`.dynamic("key")`) are asked of the running daemon (`propctl list`) on the bus the line
/// names (`--system`, `--user`, `--address`), command keys (`.dynamic("command")`) are the keys
/// of their `Executing` state, fixed choices are offered as they are, and nothing is offered
/// where a value, a type or a command's input goes.
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

    private func words(_ options: [OptionSpec]) -> String {
        options.flatMap { option in [option.longFlag] + (option.short.map { ["-\($0)"] } ?? []) }.joined(separator: " ")
    }

    private var allOptions: [OptionSpec] { root.options + root.subcommands.flatMap(\.options) }

    /// Every flag that takes a value, long and short, once each.
    private var valueFlags: [String] {
        Array(Set(allOptions.filter(\.takesValue).flatMap { [$0.longFlag] + ($0.short.map { ["-\($0)"] } ?? []) })).sorted()
    }

    /// The value flags as `COMMAND:FLAG` patterns, grouped by what their value completes to.
    /// A flag that means one kind of value wherever it is declared is `*:FLAG`; one whose
    /// commands differ (dump's `--format` json|lines, history's table|json|script|profile) gets
    /// a pattern per command.
    private var valueFlagsByHint: [(flags: [String], hint: CompletionHint)] {
        var declared: [(command: String, option: OptionSpec)] = root.options.map { ("*", $0) }
        for command in root.subcommands { declared += command.options.map { (command.name, $0) } }
        declared.removeAll { !$0.option.takesValue }
        var hints: [String: Set<String>] = [:]
        for (_, option) in declared { hints[option.longFlag, default: []].insert("\(option.completion)") }
        var groups: [(flags: [String], hint: CompletionHint)] = []
        var seen: Set<String> = []
        for (command, option) in declared {
            let scope = (hints[option.longFlag]?.count ?? 0) > 1 ? command : "*"
            guard seen.insert(scope + ":" + option.longFlag).inserted else { continue }
            let flags = ([option.longFlag] + (option.short.map { ["-\($0)"] } ?? [])).map { scope + ":" + $0 }
            if let index = groups.firstIndex(where: { $0.hint == option.completion }) {
                groups[index].flags += flags
            } else {
                groups.append((flags, option.completion))
            }
        }
        return groups
    }

    // MARK: bash (and zsh through bashcompinit)

    /// The bash statement that fills COMPREPLY for `hint` from `$cur`.
    private func bashReply(_ hint: CompletionHint, prefix: String = "") -> String {
        let name = root.name
        switch hint {
        case .none: return "COMPREPLY=()"
        case .file: return "COMPREPLY=($(compgen -f -- \"$cur\"))"
        case .choices(let words): return "COMPREPLY=($(compgen -W \"\(words.joined(separator: " "))\" -- \"$cur\"))"
        case .dynamic("command"):
            return "COMPREPLY=($(compgen -W \"$(_\(name)_keys \"${bus[@]}\" | sed -n 's/\\.Executing$//p')\" -- \"$cur\"))"
        case .dynamic("render"):
            return "COMPREPLY=($(compgen -W \"$(command \(name) \"${bus[@]}\" render list 2>/dev/null | cut -f1)\" -- \"$cur\"))"
        case .dynamic:
            return "COMPREPLY=($(compgen -W \"$(_\(name)_keys \"${bus[@]}\")\" -- \"$cur\"))"
        }
    }

    /// `case` arms on "COMMAND:POSITION" for every positional that completes something; a
    /// repeating last positional takes every later position.
    private var bashPositionalArms: [String] {
        var arms: [String] = []
        for command in root.subcommands {
            for (index, positional) in command.positionals.enumerated() {
                let pattern = positional.isRepeating ? "\(command.name):*" : "\(command.name):\(index)"
                // Earlier positions have their own arms above, so "COMMAND:*" means this one or later.
                guard positional.completion != .none else { continue }
                arms.append("    \(pattern)) \(bashReply(positional.completion)) ;;")
            }
        }
        return arms
    }

    func bash(function: String? = nil) -> String {
        let name = root.name
        let function = function ?? "_\(name)"
        let optionArms = root.subcommands.map { "    \($0.name)) opts=\"\(words($0.options))\" ;;" }
        let valueArms = valueFlagsByHint.map { "    \($0.flags.joined(separator: "|"))) \(bashReply($0.hint)) ;;" }
        return """
            # bash completion for \(name), generated from its command specification
            # (\(name) completion bash). Keys come from the running daemon.
            _\(name)_keys() { # BUS_ARGS...: every key
              command \(name) "$@" list 2>/dev/null | cut -f1
            }
            \(function)() {
              # (line_words, not words: zsh's completion owns that name.)
              # readline splits words at COMP_WORDBREAKS (":" and "=" too): join what no blank
              # separates, so --address unix:path=… and --format=json are one word each.
              local line_words=() line_cword=0 i pos=0 w rest gap
              for ((i = 0; i < ${#COMP_WORDS[@]}; i++)); do
                w=${COMP_WORDS[i]}
                rest=${COMP_LINE:$pos}
                gap=${rest%%[^[:blank:]]*}
                if ((i > 0 && ${#gap} == 0)); then line_words[${#line_words[@]}-1]+=$w; else line_words+=("$w"); fi
                pos=$((pos + ${#gap} + ${#w}))
                ((i == COMP_CWORD)) && line_cword=$((${#line_words[@]} - 1))
              done
              local cur=${line_words[line_cword]} prev=${line_words[line_cword-1]}
              # What bash replaces is the last piece readline split off; the rest of cur stays.
              local keep=${cur%"${COMP_WORDS[COMP_CWORD]}"}
              \(function)_reply "$cur" "$prev"
              [ -n "$keep" ] && COMPREPLY=("${COMPREPLY[@]#"$keep"}")
              return 0
            }
            \(function)_reply() {
              local cur=$1 prev=$2 cmd="" position=-1 bus=() opts="" i
              for ((i = 1; i < line_cword; i++)); do
                case ${line_words[i]} in
                  --system|--user) bus+=("${line_words[i]}") ;;
                  --address) bus+=(--address "${line_words[i+1]}"); ((i++)) ;;
                  --address=*) bus+=("${line_words[i]}") ;;
                  \(valueFlags.filter { $0 != "--address" }.joined(separator: "|"))) ((i++)) ;;
                  -*) ;;
                  *) if [ -z "$cmd" ]; then cmd=${line_words[i]}; position=0; else ((position++)); fi ;;
                esac
              done
              # An option's value: after the option, or after "--option=".
              local option=$prev
              if [[ $cur == --*=* ]]; then option=${cur%%=*}; cur=${cur#*=}; fi
              case ${cmd:-*}:$option in
            \(valueArms.joined(separator: "\n"))
                *) option="" ;;
              esac
              if [ -n "$option" ]; then
                [[ $1 == --*=* ]] && COMPREPLY=("${COMPREPLY[@]/#/$option=}")
                return
              fi
              local global="\(words(root.options))"
              if [ -z "$cmd" ]; then
                if [[ $cur == -* ]]; then
                  COMPREPLY=($(compgen -W "$global" -- "$cur"))
                else
                  COMPREPLY=($(compgen -W "\(root.subcommands.map(\.name).joined(separator: " "))" -- "$cur"))
                fi
                return
              fi
              if [[ $cur == -* ]]; then
                case $cmd in
            \(optionArms.joined(separator: "\n"))
                esac
                COMPREPLY=($(compgen -W "$opts $global" -- "$cur"))
                return
              fi
              COMPREPLY=()
              case $cmd:$position in
            \(bashPositionalArms.joined(separator: "\n"))
              esac
            }
            complete -F \(function) \(name)
            """
    }

    /// zsh runs the bash functions through its bashcompinit layer, so both shells complete
    /// alike. compinit autoloads this file as the function `_propctl` at the first Tab; the
    /// body defines the completion and then answers that Tab too (it did nothing before).
    func zsh() -> String {
        let name = root.name
        let function = "_\(name)_bash"
        return """
            #compdef \(name)
            # zsh completion for \(name), generated from its command specification
            # (\(name) completion zsh): the bash completion, through bashcompinit.
            autoload -U +X bashcompinit && bashcompinit
            \(bash(function: function))
            if [[ ${funcstack[1]-} == _\(name) ]]; then
              _bash_complete -F \(function) "$@"
            fi
            """
    }

    // MARK: fish

    func fish() -> String {
        let name = root.name
        func quoted(_ text: String) -> String { "'" + text.replacingAll("\\", with: "\\\\").replacingAll("'", with: "\\'") + "'" }
        func arguments(_ hint: CompletionHint) -> String {
            switch hint {
            case .none: " -x"
            case .file: " -r -F"
            case .choices(let words): " -x -a \(quoted(words.joined(separator: " ")))"
            case .dynamic("command"): " -x -a '(__\(name)_commands)'"
            case .dynamic("render"): " -x -a '(__\(name)_renders)'"
            case .dynamic: " -x -a '(__\(name)_keys)'"
            }
        }
        func option(_ option: OptionSpec, condition: String?) -> String {
            var line = "complete -c \(name)"
            if let condition { line += " -n \(quoted(condition))" }
            line += " -l \(option.long)"
            if let short = option.short { line += " -s \(short)" }
            if option.takesValue { line += arguments(option.completion) }
            return line + " -d \(quoted(option.help))"
        }
        let valueFlags = valueFlags.filter { $0 != "--address" }
        var lines = [
            "# fish completion for \(name), generated from its command specification (\(name) completion fish).",
            "# The bus options already on the line, for the daemon asked for keys.",
            "function __\(name)_bus",
            "    set -l tokens (commandline -opc)",
            "    for i in (seq 2 (count $tokens))",
            "        switch $tokens[$i]",
            "            case --system --user '--address=*'",
            "                echo $tokens[$i]",
            "            case --address",
            "                echo --address",
            "                set -l next (math $i + 1)",
            "                test $next -le (count $tokens); and echo $tokens[$next]",
            "        end",
            "    end",
            "end",
            "function __\(name)_keys",
            "    \(name) (__\(name)_bus) list 2>/dev/null | string split -f1 \\t",
            "end",
            "function __\(name)_renders",
            "    \(name) (__\(name)_bus) render list 2>/dev/null | string split -f1 \\t",
            "end",
            "function __\(name)_commands",
            // A literal replace: a "$" anchor would need escaping in fish's double quotes.
            "    __\(name)_keys | string replace -f .Executing ''",
            "end",
            "# The subcommand and the index of the positional being completed: \"set 1\" for VALUE.",
            "function __\(name)_position",
            "    set -l tokens (commandline -opc)",
            "    set -l command ''",
            "    set -l position -1",
            "    set -l skip 0",
            "    for token in $tokens[2..-1]",
            "        if test $skip = 1",
            "            set skip 0",
            "            continue",
            "        end",
            "        switch $token",
            "            case --address \(valueFlags.joined(separator: " "))",
            "                set skip 1",
            "            case '-*'",
            "            case '*'",
            "                if test -z \"$command\"",
            "                    set command $token",
            "                    set position 0",
            "                else",
            "                    set position (math $position + 1)",
            "                end",
            "        end",
            "    end",
            "    echo $command $position",
            "end",
            "# __\(name)_at COMMAND INDEX [repeating]: whether the word being completed is that positional.",
            "function __\(name)_at",
            "    set -l at (string split ' ' (__\(name)_position))",
            "    test \"$at[1]\" = $argv[1]; or return 1",
            "    if set -q argv[3]",
            "        test $at[2] -ge $argv[2]",
            "    else",
            "        test $at[2] -eq $argv[2]",
            "    end",
            "end",
            "complete -c \(name) -f",
        ]
        lines += root.options.map { option($0, condition: nil) }
        let names = root.subcommands.map(\.name).joined(separator: " ")
        for command in root.subcommands {
            lines.append("complete -c \(name) -n \(quoted("not __fish_seen_subcommand_from \(names)")) -a \(command.name) -d \(quoted(command.abstract))")
            let seen = "__fish_seen_subcommand_from \(command.name)"
            lines += command.options.map { option($0, condition: seen) }
            for (index, positional) in command.positionals.enumerated() where positional.completion != .none {
                let at = "__\(name)_at \(command.name) \(index)" + (positional.isRepeating ? " repeating" : "")
                switch positional.completion {
                case .file: lines.append("complete -c \(name) -n \(quoted(at)) -F")
                default: lines.append("complete -c \(name) -n \(quoted(at))" + arguments(positional.completion).replacingAll(" -x", with: ""))
                }
            }
        }
        return lines.joined(separator: "\n")
    }
}
