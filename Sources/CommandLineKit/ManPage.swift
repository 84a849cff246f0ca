/// Renders a `CommandSpec` tree as a roff manual page (`man 7 man-pages` layout), so that
/// `propctl(1)` says what `--help` says and what the parser accepts.
public struct ManPage: Sendable {
    /// The root of the command tree.
    public let root: CommandSpec
    /// The version printed in the footer.
    public var version: String
    /// Other pages, e.g. `propbusd(8)`.
    public var seeAlso: [String]

    /// Creates a page for the tree under `root`.
    public init(root: CommandSpec, version: String, seeAlso: [String] = []) {
        self.root = root
        self.version = version
        self.seeAlso = seeAlso
    }

    /// The page for section `section`.
    public func render(section: Int = 1) -> String {
        var lines = [".TH \(root.name.uppercased()) \(section) \"\" \"\(root.name) \(version)\" \"User Commands\"",
                     ".SH NAME", "\(Self.escape(root.name)) \\- \(Self.escape(root.abstract))",
                     ".SH SYNOPSIS", ".B \(root.name)", "[\\fIOPTIONS\\fR] \\fICOMMAND\\fR [\\fIARGS\\fR...]"]
        if let discussion = root.discussion { lines += [".SH DESCRIPTION"] + Self.paragraphs(discussion) }
        lines.append(".SH OPTIONS")
        lines += root.options.flatMap(Self.option)
        lines.append(".SH COMMANDS")
        for command in root.subcommands {
            let usage = ([command.name] + (command.options.isEmpty ? [] : ["[OPTIONS]"]) + command.positionals.map(\.usage)).joined(separator: " ")
            lines += [".SS \"\(Self.escape(usage))\"", Self.escape(command.abstract)]
            if let discussion = command.discussion { lines += [".PP"] + Self.paragraphs(discussion) }
            if !command.positionals.isEmpty {
                for positional in command.positionals {
                    lines += [".TP", "\\fI\(Self.escape(positional.displayName))\\fR", Self.escape(positional.help)]
                }
            }
            lines += command.options.flatMap(Self.option)
            if !command.examples.isEmpty {
                lines += [".PP", "Examples:"]
                for example in command.examples {
                    lines += [".PP", Self.escape(example.summary) + ":", ".RS 4", ".EX", Self.escape(example.commandLine), ".EE", ".RE"]
                }
            }
        }
        if !root.examples.isEmpty {
            lines.append(".SH EXAMPLES")
            for example in root.examples {
                lines += [".PP", Self.escape(example.summary) + ":", ".RS 4", ".EX", Self.escape(example.commandLine), ".EE", ".RE"]
            }
        }
        for (title, entries) in [("EXIT STATUS", root.exitStatuses), ("ENVIRONMENT", root.environment), ("FILES", root.files)]
        where !entries.isEmpty {
            lines.append(".SH \"\(title)\"")
            for entry in entries {
                lines += [".TP", "\\fB\(Self.escape(entry.term))\\fR", Self.escape(entry.text)]
            }
        }
        if !seeAlso.isEmpty {
            lines += [".SH \"SEE ALSO\"", seeAlso.map { page -> String in
                let parts = page.split(separator: "(")
                return "\\fB\(Self.escape(String(parts[0])))\\fR(\(parts.dropFirst().joined())"
            }.joined(separator: ",\n")]
        }
        return lines.joined(separator: "\n") + "\n"
    }

    /// One option as a roff `.TP` item: the same label and text as in `--help`.
    public static func option(_ option: OptionSpec) -> [String] {
        var label = "\\fB" + escape(option.longFlag) + "\\fR"
        if let short = option.short { label = "\\fB\\-\(short)\\fR, " + label }
        if let value = option.valueName { label += " \\fI\(escape(value))\\fR" }
        return [".TP", label, escape(option.help) + (option.isRepeatable ? " May be repeated." : "")]
    }

    /// A discussion as roff: blank lines start paragraphs, indented lines are kept as they are.
    public static func paragraphs(_ text: String) -> [String] {
        var lines: [String] = []
        var inVerbatim = false
        for line in text.split(separator: "\n", omittingEmptySubsequences: false) {
            if line.isEmpty {
                if inVerbatim { lines.append(".fi"); inVerbatim = false }
                lines.append(".PP")
            } else if line.hasPrefix(" ") {
                if !inVerbatim { lines.append(".nf"); inVerbatim = true }
                lines.append(escape(String(line)))
            } else {
                if inVerbatim { lines.append(".fi"); inVerbatim = false }
                lines.append(escape(String(line)))
            }
        }
        if inVerbatim { lines.append(".fi") }
        return lines
    }

    /// Text safe in roff: backslashes and dashes escaped, and no line read as a request.
    public static func escape(_ text: String) -> String {
        var result = text.replacingAll("\\", with: "\\e").replacingAll("-", with: "\\-")
        if result.hasPrefix(".") || result.hasPrefix("'") { result = "\\&" + result }
        return result
    }
}
