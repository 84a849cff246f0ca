import CommandLineKit
import XCTest
@testable import propbusd

/// propbusd's command line through the shared parser: values, their checks, and the usage
/// errors (which `main` turns into exit 64).
final class DaemonOptionsTests: XCTestCase {
    /// The help adds "May be repeated." to a repeatable option: its own text must not say so too.
    func testNoRepeatableOptionSaysSoItself() {
        for option in DaemonOptions.spec.options where option.isRepeatable {
            XCTAssertFalse(option.help.lowercased().contains("repeat"), "--\(option.long): \(option.help)")
        }
    }

    private func run(_ arguments: [String]) throws -> DaemonOptions {
        guard case .run(let options) = try DaemonOptions.parse(arguments) else {
            XCTFail("\(arguments) did not parse to options")
            throw UsageError("not run", commandPath: [])
        }
        return options
    }

    private func usageError(_ arguments: [String], file: StaticString = #filePath, line: UInt = #line) -> String? {
        do {
            let parsed = try DaemonOptions.parse(arguments)
            XCTFail("\(arguments) parsed: \(parsed)", file: file, line: line)
            return nil
        } catch {
            return error.message
        }
    }

    func testDefaults() throws {
        let options = try run([])
        guard case .session = options.bus else { return XCTFail("\(options.bus)") }
        XCTAssertEqual(options.maximumExecutions, 64)
        XCTAssertEqual(options.service.maximumBindingsPerClient, 64)
        XCTAssertEqual(options.limits.maximumValueSize, 1_048_576)
        XCTAssertEqual(options.limits.maximumMessageSize, 33_554_432)
        XCTAssertEqual(options.limits.maximumProperties, 100_000)
        XCTAssertNil(options.stateDirectory)
        XCTAssertFalse(options.recover || options.inMemory || options.systemAccess || options.strictModels)
        XCTAssertFalse(options.enforcesAccess)
        XCTAssertEqual(options.models, [])
    }

    func testEveryOptionLandsInItsField() throws {
        let options = try run([
            "--address", "unix:path=/run/x", "--system-access", "--max-value-size=4096", "--max-message-size", "65536",
            "--max-properties", "10", "--max-bindings-per-client", "3", "--max-executions", "2",
            "--max-reply-bytes-per-uid", "1000", "--model", "a.json", "--model=b.json", "--strict-models", "--state-dir", "/tmp/s", "--recover", "--in-memory",
            "--max-model-file-size", "1024",
        ])
        guard case .address("unix:path=/run/x") = options.bus else { return XCTFail("\(options.bus)") }
        XCTAssertTrue(options.systemAccess && options.enforcesAccess && options.strictModels && options.recover && options.inMemory)
        XCTAssertEqual(options.limits.maximumValueSize, 4096)
        XCTAssertEqual(options.limits.maximumMessageSize, 65536)
        XCTAssertEqual(options.limits.maximumProperties, 10)
        XCTAssertEqual(options.service.maximumBindingsPerClient, 3)
        XCTAssertEqual(options.service.maximumReplyBytesPerUID, 1000)
        XCTAssertEqual(options.maximumExecutions, 2)
        XCTAssertEqual(options.models, ["a.json", "b.json"])
        XCTAssertEqual(options.maximumModelFileSize, 1024)
        XCTAssertEqual(try run([]).maximumModelFileSize, 8 << 20)
        XCTAssertEqual(options.stateDirectory, "/tmp/s")
    }

    func testAClientCertificateAndItsKeyGoTogether() throws {
        let options = try run(["--fleet", "etcd://10.0.0.1:2379/lab", "--fleet-cert", "/etc/propbus/host.pem", "--fleet-key", "/etc/propbus/host.key"])
        let fleet = try XCTUnwrap(options.fleet)
        XCTAssertEqual(fleet.certFile, "/etc/propbus/host.pem")
        XCTAssertEqual(fleet.keyFile, "/etc/propbus/host.key")
        XCTAssertEqual(fleet.endpoints, ["https://10.0.0.1:2379"], "a client certificate means https")
        XCTAssertEqual(usageError(["--fleet", "etcd://h:2379/p", "--fleet-cert", "/c.pem"]),
                       "--fleet-cert and --fleet-key go together: a client certificate and its private key")
    }

    func testFleetOptionsLandTogetherAndNeedFleet() throws {
        XCTAssertNil(try run([]).fleet, "without --fleet nothing changes")
        let options = try run(["--fleet", "etcds://10.0.0.1:2379,10.0.0.2:2379/lab", "--fleet-ca", "/etc/propbus/ca.pem",
                               "--fleet-credentials", "/etc/propbus/etcd", "--fleet-host", "kiosk-7"])
        let fleet = try XCTUnwrap(options.fleet)
        XCTAssertEqual(fleet.members, ["10.0.0.1:2379", "10.0.0.2:2379"])
        XCTAssertEqual(fleet.prefix, "/lab/")
        XCTAssertEqual(fleet.endpoints, ["https://10.0.0.1:2379", "https://10.0.0.2:2379"])
        XCTAssertEqual(fleet.caFile, "/etc/propbus/ca.pem")
        XCTAssertEqual(fleet.credentialsFile, "/etc/propbus/etcd")
        XCTAssertEqual(fleet.hostName, "kiosk-7")
        XCTAssertEqual(usageError(["--fleet-ca", "/x"]), "--fleet-ca, --fleet-cert, --fleet-key, --fleet-credentials and --fleet-host go with --fleet etcd://HOST:PORT/PREFIX")
        XCTAssertTrue(usageError(["--fleet", "etcd://h:2379"])?.contains("no /PREFIX") ?? false)
        XCTAssertTrue(usageError(["--fleet", "etcd://h:2379/p", "--fleet-host", "a/b"])?.contains("without '/'") ?? false)
    }

    func testSystemBusEnforcesAccess() throws {
        let options = try run(["--system"])
        guard case .system = options.bus else { return XCTFail("\(options.bus)") }
        XCTAssertTrue(options.enforcesAccess)
    }

    func testHelpAndVersion() throws {
        for arguments in [["--help"], ["-h"], ["--max-value-size", "0", "--help"], ["--bogus", "-h"]] {
            guard case .help = try DaemonOptions.parse(arguments) else { return XCTFail("\(arguments)") }
        }
        guard case .version = try DaemonOptions.parse(["--version"]) else { return XCTFail("--version") }
    }

    func testInvalidValuesKeepTheirMessages() {
        XCTAssertEqual(usageError(["--max-value-size", "0"]), "--max-value-size expects a positive integer, got '0'")
        XCTAssertEqual(usageError(["--max-properties", "-5"]), "--max-properties expects a positive integer, got '-5'")
        XCTAssertEqual(usageError(["--max-executions=lots"]), "--max-executions expects a positive integer, got 'lots'")
        XCTAssertEqual(usageError(["--max-message-size", "1000"]),
                       "--max-message-size expects 65536 to 134217728 bytes (the protocol's limit), got 1000")
        XCTAssertEqual(usageError(["--max-message-size", "134217729"]),
                       "--max-message-size expects 65536 to 134217728 bytes (the protocol's limit), got 134217729")
        XCTAssertEqual(usageError(["--state-dir="]), "--state-dir expects a directory")
    }

    func testQuotasAreSetOneByOne() throws {
        guard case .run(let options) = try DaemonOptions.parse(["--quota", "bindings=5", "--quota=stored-bytes=0", "--quota", "bindings=7"]) else { return XCTFail() }
        XCTAssertEqual(options.quotas, [.bindings: 7, .storedBytes: 0], "the last of a quota wins")
        XCTAssertEqual(usageError(["--quota", "bindings"]),
                       "--quota expects NAME=N with NAME one of bindings, executions, input-bytes, properties, commands, stored-bytes, overrides, history-bytes, got 'bindings'")
        XCTAssertEqual(usageError(["--quota", "executions=-1"]), "--quota executions=N expects a number N ≥ 0, got 'executions=-1'")
        XCTAssertTrue(DaemonOptions.help.contains("bindings (bindings; default 64)"), DaemonOptions.help)
    }

    func testMalformedLinesAreUsageErrors() {
        XCTAssertEqual(usageError(["--max-value-size"]), "option '--max-value-size' needs a value BYTES")
        XCTAssertEqual(usageError(["--system-access=yes"]), "option '--system-access' takes no value")
        XCTAssertEqual(usageError(["--system", "--address", "unix:path=/x"]),
                       "options '--system' and '--address' cannot be used together")
        XCTAssertEqual(usageError(["--state-dir", "a", "--state-dir", "b"]), "option '--state-dir' given more than once")
        XCTAssertEqual(usageError(["serve"]), "unexpected argument 'serve'")
    }

    func testUnknownOptionSuggestsTheNearest() {
        XCTAssertEqual(usageError(["--max-exectuions", "3"]), "unknown option '--max-exectuions'; did you mean '--max-executions'?")
        XCTAssertEqual(usageError(["--in-memroy"]), "unknown option '--in-memroy'; did you mean '--in-memory'?")
        XCTAssertEqual(usageError(["--no-such-option"]), "unknown option '--no-such-option'")
    }

    func testUsageErrorTextNamesTheHelp() {
        let error = UsageError("unknown option '--x'", commandPath: [])
        XCTAssertEqual(HelpGenerator(root: DaemonOptions.spec).errorText(for: error), """
            propbusd: unknown option '--x'
            Usage: propbusd [OPTIONS]
            Run 'propbusd --help' for more information.
            """)
    }

    /// Every option of the table is in --help and in propbusd(8): both are generated from the spec.
    func testHelpAndManPageListEveryOption() {
        let help = DaemonOptions.help
        let page = DaemonManPage.render(version: "0")
        for option in DaemonOptions.spec.options {
            XCTAssertTrue(help.contains(option.longFlag + (option.valueName.map { " " + $0 } ?? "")), "--help lacks \(option.longFlag)")
            XCTAssertTrue(page.contains(ManPage.escape(option.longFlag)), "propbusd(8) lacks \(option.longFlag)")
        }
        XCTAssertTrue(help.hasPrefix("Serves typed, observable properties on D-Bus as org.propbus.PropBus1.\n\nUsage: propbusd [OPTIONS]\n"), help)
        XCTAssertTrue(help.contains("Only one of --session, --system or --address may be given."), help)
    }
}
