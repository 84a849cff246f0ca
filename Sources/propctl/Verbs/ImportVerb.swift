import CommandLineKit

/// `propctl import dconf|gschema|dconf-db …`: dconf's and GSettings' files into propbus
/// (``DConfImport``, ``GSchemaImport``, ``DConfDatabaseImport``).
enum ImportVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        switch parsed.positional("FORMAT") ?? "" {
        case "dconf": try await DConfImport.run(parsed)
        case "gschema": try await GSchemaImport.run(parsed)
        case "dconf-db": try await DConfDatabaseImport.run(parsed)
        case let format:
            throw CommandFailure(.usage, "cannot import '\(format)': the formats are dconf (a dconf dump), gschema (schema files) and dconf-db (/etc/dconf/db/NAME.d)")
        }
    }
}

/// `propctl export dconf [DIR]` (``DConfExport``).
enum ExportVerb: Subcommand {
    static func run(_ parsed: ParsedCommand) async throws(CommandFailure) {
        let format = parsed.positional("FORMAT") ?? ""
        guard format == "dconf" else {
            throw CommandFailure(.usage, "cannot export '\(format)': the one format is dconf (what dconf load reads)")
        }
        try await DConfExport.run(parsed)
    }
}
