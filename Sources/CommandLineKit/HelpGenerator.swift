/// Renders help and usage text from a `CommandSpec` tree: the same declaration the parser
/// reads, so what the help promises is what the parser accepts.
public struct HelpGenerator: Sendable {
    /// The root of the command tree.
    public let root: CommandSpec
    /// The column at which text is wrapped.
    public var width: Int
    /// The widest label (option, argument or subcommand) that still shares a line with its help.
    public var maximumLabelWidth = 24

    /// Creates a generator for the tree under `root`, wrapping at `width` columns.
    public init(root: CommandSpec, width: Int = 80) {
        self.root = root
        self.width = width
    }

    /// The usage line for the command at `path`, e.g. `propctl set [OPTIONS] KEY VALUE`.
    public func usage(for path: [String]) -> String {
        let command = root.command(at: path) ?? root
        var parts = [([root.name] + path).joined(separator: " ")]
        if root.scopes(along: path).contains(where: { !$0.options.isEmpty }) { parts.append("[OPTIONS]") }
        if !command.subcommands.isEmpty && command.positionals.isEmpty { parts.append("SUBCOMMAND") }
        parts += command.positionals.map(\.usage)
        return parts.joined(separator: " ")
    }

    /// The complete help of the command at `path` (`[]` for the root), without a final newline.
    public func help(for path: [String]) -> String {
        // An unknown path falls back to the root's help rather than failing.
        let (command, validPath) = root.command(at: path).map { ($0, path) } ?? (root, [])
        let ancestors = Array(root.scopes(along: validPath).dropFirst())
        let inherited = ancestors.reversed().flatMap(\.options)
        let labels = Labels(showsShortColumn: (command.options + inherited).contains { $0.short != nil })

        var sections: [[String]] = [wrap(command.abstract, indent: 0), ["Usage: \(usage(for: validPath))"]]
        if let discussion = command.discussion {
            sections.append(discussion.split(separator: "\n", omittingEmptySubsequences: false).flatMap {
                wrapPreservingIndent(String($0))
            })
        }
        if !command.exitStatuses.isEmpty {
            let width = (command.exitStatuses.map(\.term.count).max() ?? 0) + 2
            sections.append(["Exit status:"] + command.exitStatuses.map { entry in
                "  " + entry.term + String(repeating: " ", count: width - entry.term.count) + entry.text
            })
        }

        var rows: [[Row]] = []
        var headings: [String] = []
        var notes: [[String]] = []
        func addSection(_ heading: String, _ sectionRows: [Row], exclusive: [[String]] = []) {
            guard !sectionRows.isEmpty else { return }
            headings.append(heading)
            rows.append(sectionRows)
            notes.append(exclusive.map { "Only one of \(Self.list($0.map { "--\($0)" }, conjunction: "or")) may be given." })
        }
        addSection("Arguments:", command.positionals.map { Row(label: $0.displayName, help: $0.help) })
        addSection("Options:", command.options.map { labels.row(for: $0) },
                   exclusive: command.exclusiveOptions)
        addSection("Global options:", inherited.map { labels.row(for: $0) },
                   exclusive: ancestors.flatMap(\.exclusiveOptions))
        addSection("Subcommands:", command.subcommands.map { Row(label: $0.name, help: $0.abstract) })

        let labelWidth = min(maximumLabelWidth, rows.joined().map(\.label.count).max() ?? 0)
        for (index, heading) in headings.enumerated() {
            sections.append([heading] + rows[index].flatMap { render($0, labelWidth: labelWidth) }
                + notes[index].flatMap { wrap($0, indent: 2) })
        }

        if !command.examples.isEmpty {
            let examples = command.examples.map { example in
                wrap(example.summary, indent: 2, prefix: "# ") + ["  \(example.commandLine)"]
            }
            sections.append(["Examples:"] + examples.joined(separator: [""]))
        }
        if !command.subcommands.isEmpty {
            let name = ([root.name] + validPath).joined(separator: " ")
            sections.append(wrap("Run '\(name) SUBCOMMAND --help' for more about a subcommand.", indent: 0))
        }
        return sections.map { $0.joined(separator: "\n") }.joined(separator: "\n\n")
    }

    /// What `main` prints to stderr for a usage error: the problem, the usage line of the
    /// command concerned, and where to find its help.
    public func errorText(for error: UsageError) -> String {
        let name = ([root.name] + error.commandPath).joined(separator: " ")
        return """
            \(name): \(error.message)
            Usage: \(usage(for: error.commandPath))
            Run '\(name) --help' for more information.
            """
    }

    // MARK: - Layout

    /// A label and its help, laid out in two columns.
    private struct Row {
        var label: String
        var help: String
    }

    /// Builds option labels so that long names line up whether or not an option has a short one.
    private struct Labels {
        var showsShortColumn: Bool

        func row(for option: OptionSpec) -> Row {
            var label = option.short.map { "-\($0), " } ?? (showsShortColumn ? "    " : "")
            label += option.longFlag
            if let valueName = option.valueName { label += " \(valueName)" }
            return Row(label: label, help: option.isRepeatable ? option.help + " May be repeated." : option.help)
        }
    }

    private func render(_ row: Row, labelWidth: Int) -> [String] {
        let column = 2 + labelWidth + 2
        let help = wrap(row.help, indent: column)
        guard row.label.count <= labelWidth, let first = help.first else {
            return ["  \(row.label)"] + help
        }
        let padding = String(repeating: " ", count: labelWidth - row.label.count + 2)
        return ["  \(row.label)\(padding)\(first.dropFirst(column))"] + help.dropFirst()
    }

    /// Wraps one discussion line, keeping its indentation; a `- ` bullet hangs under its text.
    private func wrapPreservingIndent(_ line: String) -> [String] {
        let indent = line.prefix { $0 == " " }.count
        let text = line.dropFirst(indent)
        // A line that fits is kept verbatim, so tables aligned with runs of spaces survive.
        guard line.count > width else { return [line] }
        if text.hasPrefix("- ") { return wrap(String(text.dropFirst(2)), indent: indent, prefix: "- ") }
        return wrap(String(text), indent: indent)
    }

    /// Greedy word wrap: every line starts with `indent` spaces, the first also with `prefix`
    /// (and later ones with as many spaces), and none passes `width` unless a word is longer.
    private func wrap(_ text: String, indent: Int, prefix: String = "") -> [String] {
        let margin = String(repeating: " ", count: indent)
        var lines: [String] = []
        var line = margin + prefix
        var lineHasWord = false
        for word in text.split(separator: " ") {
            if lineHasWord && line.count + 1 + word.count > width {
                lines.append(line)
                line = margin + String(repeating: " ", count: prefix.count)
                lineHasWord = false
            }
            line += (lineHasWord ? " " : "") + word
            lineHasWord = true
        }
        lines.append(line)
        return lines
    }

    /// `a`, `a or b`, `a, b or c`.
    private static func list(_ items: [String], conjunction: String) -> String {
        guard items.count > 1 else { return items.first ?? "" }
        return items.dropLast().joined(separator: ", ") + " \(conjunction) " + items[items.count - 1]
    }
}
