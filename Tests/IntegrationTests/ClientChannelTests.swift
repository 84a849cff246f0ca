import DBus
import Foundation
import XCTest

/// `propctl bind` client-side channels, through the real binaries on a private bus: the bus
/// wins at the start, every kind of file change is seen, nothing echoes, the ReactiveCocoa bug
/// sequences stay fixed, the transforms and directions hold, and the binding survives a daemon
/// restart.
///
/// "No extra signal" is proven with a marker key changed after the operations under test: the
/// daemon's signals reach a subscriber in the order they were sent, so whatever arrived before
/// the marker's signal is everything the operations caused.
final class ClientChannelTests: DaemonTestCase, @unchecked Sendable {
    private static let markerKey = "test.marker.tick"
    private var markerValue: Int32 = 0
    private var directory: URL!
    private var binds: [ChildProcess] = []

    override func setUp() async throws {
        try await super.setUp()
        directory = try makeTemporaryDirectory(prefix: "pbit-chan")
        try await client.create(Self.markerKey, "i", default: .int32(0))
    }

    override func tearDown() async throws {
        for bind in binds { await bind.stop() }
        binds = []
        if let directory { try? FileManager.default.removeItem(at: directory) }
        try await super.tearDown()
    }

    // MARK: Helpers

    /// Starts `propctl --address <bus> bind KEY ARGS…` in the background, with the idle report
    /// on (see ``changes(of:in:idle:settle:)``).
    private func bind(_ key: String, _ arguments: [String], environment: [String: String] = [:]) throws -> ChildProcess {
        let process = try ChildProcess(BuildProducts.propctl, ["--address", bus.address, "bind", key] + arguments,
                                       environment: bus.environment.merging(environment) { $1 }.merging(["PROPCTL_TEST_IDLE_REPORT": "1"]) { $1 })
        binds.append(process)
        return process
    }

    /// Starts a file binding and waits until the file shows `expected`: the initial value is
    /// written after the watch is set, so from then on every change is seen.
    private func bindFile(_ key: String, _ path: String, expecting expected: String, _ extra: [String] = [],
                          environment: [String: String] = [:]) async throws -> ChildProcess {
        let process = try bind(key, ["--file", path] + extra, environment: environment)
        let ready = await eventually(timeout: 10) { self.read(path) == expected || !process.isRunning }
        XCTAssertTrue(ready && process.isRunning, "file binding did not start: \(read(path) ?? "nil"); stderr: \(process.stderr)")
        return process
    }

    private func path(_ name: String) -> String { directory.appendingPathComponent(name).path }

    /// How many `--verbose` lines of `process` contain `text`.
    private func traces(_ process: ChildProcess, _ text: String) -> Int {
        process.stderr.components(separatedBy: "\n").filter { $0.contains(text) }.count
    }

    /// The barrier for "this change stopped in the binding": waits until `process` says, in a
    /// `--verbose` line containing `text`, that it saw a change and decided not to pass it on.
    private func awaitTrace(_ process: ChildProcess, _ text: String, after count: Int = 0,
                            file: StaticString = #filePath, line: UInt = #line) async {
        let seen = await eventually(timeout: 10) { self.traces(process, text) > count }
        XCTAssertTrue(seen, "propctl bind never said '\(text)': \(process.stderr)", file: file, line: line)
    }

    /// The file's content without its trailing newline, like the channel reads it.
    private func read(_ path: String) -> String? {
        guard var text = try? String(contentsOfFile: path, encoding: .utf8) else { return nil }
        if text.hasSuffix("\n") { text.removeLast() }
        return text
    }

    private func inode(_ path: String) -> UInt64 {
        var status = stat()
        return stat(path, &status) == 0 ? UInt64(status.st_ino) : 0
    }

    /// As `echo TEXT > PATH` does: open with truncation, write, close.
    private func echo(_ text: String, to path: String) {
        let descriptor = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        precondition(descriptor >= 0, "cannot open \(path)")
        let bytes = Array((text + "\n").utf8)
        _ = bytes.withUnsafeBytes { write(descriptor, $0.baseAddress, $0.count) }
        close(descriptor)
    }

    /// As an editor saves: write a temporary file beside it, then rename it over the original.
    private func replace(_ path: String, with text: String) throws {
        let temporary = path + ".swp"
        try Data((text + "\n").utf8).write(to: URL(fileURLWithPath: temporary))
        XCTAssertEqual(rename(temporary, path), 0)
    }

    private func waitForBus(_ key: String, _ value: DBusValue, timeout: TimeInterval = 10) async -> Bool {
        await eventually(timeout: timeout) { (try? await self.client.get(key)) == value }
    }

    private func waitForFile(_ path: String, _ text: String, timeout: TimeInterval = 10) async -> Bool {
        await eventually(timeout: timeout) { self.read(path) == text }
    }

    /// Ticks the marker and returns the values `key` was announced with before it, in order.
    ///
    /// With `idle`, the window closes once that binding says it is idle (SIGUSR1, a test hook):
    /// it has handled everything the operations caused, so a wrong echo is announced before the
    /// marker. A stream binding (`--stdio`, `--exec`) cannot tell what its other end will still
    /// say; without `idle` a wrong echo gets `settle` seconds to happen.
    private func changes(of key: String, in recorder: SignalRecorder, idle bind: ChildProcess? = nil,
                         settle: TimeInterval = 0.1) async throws -> [DBusValue] {
        if let bind {
            let before = traces(bind, "test: idle")
            kill(bind.pid, SIGUSR1)
            await awaitTrace(bind, "test: idle", after: before)
        } else {
            try await Task.sleep(nanoseconds: UInt64(settle * 1e9))
        }
        markerValue += 1
        let marker = markerValue
        try await client.set(Self.markerKey, .int32(marker))
        let (markerPath, markerName) = PropBusAPI.locate(Self.markerKey)
        let signals = await recorder.wait { signals in
            signals.contains { $0.path == markerPath && $0.changed[markerName] == .int32(marker) }
        }
        let (path, name) = PropBusAPI.locate(key)
        let end = signals.firstIndex { $0.path == markerPath && $0.changed[markerName] == .int32(marker) } ?? signals.count
        return signals[..<end].filter { $0.path == path }.compactMap { $0.changed[name] }
    }

    /// Asserts that an async condition holds (the conditions here poll with a timeout).
    private func expect(_ condition: () async -> Bool, _ message: @autoclosure () -> String = "",
                        file: StaticString = #filePath, line: UInt = #line) async {
        let holds = await condition()
        XCTAssertTrue(holds, message(), file: file, line: line)
    }

    /// What a shell's `>` does on a loaded machine: opens (truncates) `file`, runs `prelude`
    /// (with `arguments` as `$2`…), and writes `value` 0.3 s later. Waits until the bus holds
    /// `value` and returns what `key`'s signals announced meanwhile.
    private func slowWriter(of file: String, writing value: String, after prelude: String = "", _ arguments: [String] = [],
                            key: String, recorder: SignalRecorder, bind: ChildProcess) async throws -> [DBusValue] {
        let script = "exec 3>\"$1\"; \(prelude) sleep 0.3; printf '\(value)\\n' >&3; exec 3>&-"
        let writer = try await tool("/bin/sh", ["-c", script, "sh", file] + arguments)
        XCTAssertTrue(writer.succeeded, "\(writer)")
        await expect({ await waitForBus(key, .string(value)) }, bind.stderr)
        return try await changes(of: key, in: recorder, idle: bind)
    }

    /// `ui.text` bound to a file (verbose), a recorder of all signals, and the binding's Set of
    /// "one" (written to the file) in flight: the daemon is stopped until the caller sends it
    /// SIGCONT (`daemonPID`, which the caller also sends in a `defer`).
    private func bindWithASetInFlight() async throws -> (file: String, bind: ChildProcess, recorder: SignalRecorder, daemonPID: pid_t) {
        try await client.create("ui.text", "s", default: .string("start"))
        let file = path("text")
        let bind = try await bindFile("ui.text", file, expecting: "start", ["--verbose"])
        let recorder = try await recordAll()
        let daemonPID = daemon.process.pid
        XCTAssertEqual(kill(daemonPID, SIGSTOP), 0)
        echo("one", to: file)
        await awaitTrace(bind, #"sending "one""#)
        return (file, bind, recorder, daemonPID)
    }

    /// `ui.text` bound to a file (verbose) with propctl's test read gate (`gate`) closed: its next
    /// read of the file waits until the gate file is removed. Also a recorder of all signals.
    private func bindWithAReadGate() async throws -> (file: String, gate: String, bind: ChildProcess, recorder: SignalRecorder) {
        try await client.create("ui.text", "s", default: .string("start"))
        let file = path("text")
        let gate = path("gate")
        let bind = try await bindFile("ui.text", file, expecting: "start", ["--verbose"], environment: ["PROPCTL_TEST_FILE_READ_GATE": gate])
        // The barrier for the start: propctl has handled the rename of its first write, so no
        // read of that delivery meets the gate.
        await awaitTrace(bind, "which the bus holds; nothing sent")
        let recorder = try await recordAll()
        XCTAssertTrue(FileManager.default.createFile(atPath: gate, contents: nil))
        return (file, gate, bind, recorder)
    }

    private func recordAll() async throws -> SignalRecorder {
        try await client.record(pathNamespace: PropBusAPI.rootPath, interface: PropBusAPI.properties, member: "PropertiesChanged")
    }

    // MARK: The bus leads at the start

    func testBusValueWinsAtBindTimeAndNothingIsWrittenToTheBus() async throws {
        try await client.create("ui.theme", "s", default: .string("dark"))
        let file = path("theme")
        echo("light", to: file)
        let recorder = try await recordAll()
        let bind = try await bindFile("ui.theme", file, expecting: "dark")
        let announced = try await changes(of: "ui.theme", in: recorder, idle: bind)
        XCTAssertEqual(announced, [], "binding wrote to the bus")
        let value = try await client.get("ui.theme")
        XCTAssertEqual(value, .string("dark"))
        XCTAssertEqual(try String(contentsOfFile: file, encoding: .utf8), "dark\n", "a trailing newline is written")
    }

    // MARK: Every kind of file change reaches the bus

    func testAWriterThatTruncatesAndPausesIsReadWhenItClosesNotHalfWay() async throws {
        try await client.create("ui.text", "s", default: .string("start"))
        let file = path("text")
        let bind = try await bindFile("ui.text", file, expecting: "start")
        let recorder = try await recordAll()
        // What a shell's `>` does on a loaded machine: truncate on open, write much later.
        // Signals come in order: an empty value read half-way would stand before "slow".
        let announced = try await slowWriter(of: file, writing: "slow", key: "ui.text", recorder: recorder, bind: bind)
        XCTAssertEqual(announced, [.string("slow")], "the truncated file was read before its writer closed it")
    }

    func testWritesTruncationAndAtomicReplaceByAnyProgramReachTheBus() async throws {
        try await client.create("ui.text", "s", default: .string("start"))
        let file = path("text")
        let bind = try await bindFile("ui.text", file, expecting: "start", ["--verbose"])
        let recorder = try await recordAll()

        echo("written", to: file)
        await expect({ await waitForBus("ui.text", .string("written")) }, bind.stderr)

        // truncate(2) alone: a modification with no close, seen once it settles.
        XCTAssertEqual(truncate(file, 0), 0)
        await expect({ await waitForBus("ui.text", .string("")) }, bind.stderr)

        try replace(file, with: "saved by an editor")
        await expect({ await waitForBus("ui.text", .string("saved by an editor")) }, bind.stderr)

        let shell = try await tool("/bin/sh", ["-c", "printf 'from a shell\\n' > '\(file)'"])
        XCTAssertTrue(shell.succeeded, "\(shell)")
        await expect({ await waitForBus("ui.text", .string("from a shell")) }, bind.stderr)

        // Deleting the file is not a value; creating it again is.
        unlink(file)
        echo("reborn", to: file)
        await expect({ await waitForBus("ui.text", .string("reborn")) }, bind.stderr)

        let announced = try await changes(of: "ui.text", in: recorder, idle: bind)
        XCTAssertEqual(announced, [.string("written"), .string(""), .string("saved by an editor"), .string("from a shell"), .string("reborn")],
                       "one PropertiesChanged per change, no echo; stderr: \(bind.stderr)")
    }

    /// A program that opens the file for writing while propctl reads it. inotify merges an event
    /// into an identical one still unread, so the writer's IN_OPEN and propctl's own became one:
    /// counted opens fell to 0 at propctl's close, the writer's truncation looked finished and
    /// was sent as "" after the settle delay, long before the writer wrote (a flake seen in CI).
    /// The test gate holds propctl's read until the writer has opened the file.
    func testAWriterThatOpensWhilePropctlReadsIsReadWhenItClosesNotHalfWay() async throws {
        let (file, gate, bind, recorder) = try await bindWithAReadGate()
        // The bus change makes propctl read the file to compare; that read waits at the gate.
        try await client.set("ui.text", .string("from the bus"))
        await awaitTrace(bind, "test gate: a read of")
        let announced = try await slowWriter(of: file, writing: "late", after: "rm \"$2\";", [gate], key: "ui.text", recorder: recorder, bind: bind)
        XCTAssertEqual(announced, [.string("from the bus"), .string("late")], "the truncated file was read before its writer closed it: \(bind.stderr)")
        XCTAssertEqual(read(file), "late")
    }

    /// When its Set is answered, the binding looks at the file again (it may have moved on while
    /// the Set was in flight). A writer that has truncated the file but not written yet must not
    /// be read then: a half-written file is no value. (`bench/file-binding.sh` printed many
    /// "does not fit … got ''" lines from this read.)
    func testAWriterThatTruncatesWhileASetIsInFlightIsReadWhenItClosesNotHalfWay() async throws {
        // The daemon answers the Set of "one" only once the writer below has truncated the file.
        let (file, bind, recorder, daemonPID) = try await bindWithASetInFlight()
        defer { kill(daemonPID, SIGCONT) }
        let announced = try await slowWriter(of: file, writing: "late", after: "kill -CONT \"$2\";", [String(daemonPID)],
                                             key: "ui.text", recorder: recorder, bind: bind)
        XCTAssertEqual(announced, [.string("one"), .string("late")], "the truncated file was read before its writer closed it: \(bind.stderr)")
    }

    /// The same look after a Set's reply, when the writer's change is not announced yet: a
    /// writer's truncation is visible a moment before its IN_MODIFY is queued (under load
    /// `bench/file-binding.sh` read "" there in most rounds). Only its IN_OPEN, queued first,
    /// says a write may be under way, so the look waits until no program holds the file open.
    /// Writes through a shared mapping send no IN_MODIFY at all, which makes that moment last.
    func testAFileHeldOpenByAWriterIsNotReadAfterASetUntilItCloses() async throws {
        let (file, bind, recorder, daemonPID) = try await bindWithASetInFlight()
        defer { kill(daemonPID, SIGCONT) }
        // Opens the file for writing, changes "one" to "twe" through a mapping (no event), lets
        // the daemon answer, and only then finishes "two" and closes.
        let script = """
            import mmap, os, signal, sys, time
            fd = os.open(sys.argv[1], os.O_RDWR)
            view = mmap.mmap(fd, 4)
            view[0:2] = b"tw"
            os.kill(int(sys.argv[2]), signal.SIGCONT)
            time.sleep(0.3)
            view[2:3] = b"o"
            view.close()
            os.close(fd)
            """
        let writer = try await tool("/usr/bin/python3", ["-c", script, file, String(daemonPID)])
        XCTAssertTrue(writer.succeeded, "\(writer)")
        await expect({ await waitForBus("ui.text", .string("two")) }, bind.stderr)
        let announced = try await changes(of: "ui.text", in: recorder, idle: bind)
        XCTAssertEqual(announced, [.string("one"), .string("two")], "the file was read while its writer held it open: \(bind.stderr)")
    }

    /// A file deleted and created again: the deletion is read at once, and by then the new file
    /// may be there, empty, its creator not having written yet. The creation collected right
    /// after that read makes it a half-way one; the creator's close brings the value.
    func testAFileCreatedAgainWhileItsDeletionIsReadIsReadWhenItsCreatorCloses() async throws {
        let (file, gate, bind, recorder) = try await bindWithAReadGate()
        // The deletion makes propctl read the file; that read waits at the gate.
        XCTAssertEqual(unlink(file), 0)
        await awaitTrace(bind, "test gate: a read of")
        let announced = try await slowWriter(of: file, writing: "reborn", after: "rm \"$2\";", [gate], key: "ui.text", recorder: recorder, bind: bind)
        XCTAssertEqual(announced, [.string("reborn")], "the new file was read before its creator wrote it: \(bind.stderr)")
    }

    /// A local event that changes nothing (a chmod, or the late delivery of propctl's own write)
    /// may be delivered after a bus change arrived: the file still shows the value both sides
    /// last agreed on, so the bus value is newer and goes to the file. Sending the file's value
    /// instead undid the bus change. A reader holding the file open makes the chmod settle for
    /// up to 1 s, so the bus change surely comes first.
    func testAnUnchangedFileDeliveredAfterABusChangeDoesNotUndoIt() async throws {
        try await client.create("ui.text", "s", default: .string("start"))
        let file = path("text")
        let bind = try await bindFile("ui.text", file, expecting: "start", ["--verbose"])
        await awaitTrace(bind, "which the bus holds; nothing sent")
        let recorder = try await recordAll()
        let reader = open(file, O_RDONLY)
        XCTAssertGreaterThanOrEqual(reader, 0)
        defer { close(reader) }
        XCTAssertEqual(chmod(file, 0o600), 0)
        try await client.set("ui.text", .string("from the bus"))
        await expect({ await waitForFile(file, "from the bus") }, "file shows \(read(file) ?? "nil"); \(bind.stderr)")
        let announced = try await changes(of: "ui.text", in: recorder, idle: bind)
        XCTAssertEqual(announced, [.string("from the bus")], "the unchanged file undid the bus change: \(bind.stderr)")
    }

    // MARK: Bus changes reach the file

    func testBusSetReplacesTheFileAtomicallyWithOneSignalPerChange() async throws {
        try await client.create("ui.level", "i", default: .int32(1))
        let file = path("level")
        let bind = try await bindFile("ui.level", file, expecting: "1")
        let recorder = try await recordAll()
        for level: Int32 in [2, 3, 40] {
            let before = inode(file)
            try await client.set("ui.level", .int32(level))
            await expect({ await waitForFile(file, String(level)) }, "file shows \(read(file) ?? "nil"); stderr: \(bind.stderr)")
            XCTAssertNotEqual(inode(file), before, "the file was rewritten in place, not replaced")
        }
        let announced = try await changes(of: "ui.level", in: recorder, idle: bind)
        XCTAssertEqual(announced, [.int32(2), .int32(3), .int32(40)], "one PropertiesChanged per change, no echo")
        let leftovers = try FileManager.default.contentsOfDirectory(atPath: directory.path).filter { $0 != "level" }
        XCTAssertEqual(leftovers, [], "temporary files left behind")
    }

    func testInPlaceWritesKeepTheFile() async throws {
        try await client.create("led.brightness", "y", default: .byte(0))
        let file = path("brightness")
        echo("", to: file)
        let original = inode(file)
        let bind = try await bindFile("led.brightness", file, expecting: "0", ["--in-place"])
        try await client.set("led.brightness", .byte(255))
        await expect({ await waitForFile(file, "255") }, bind.stderr)
        XCTAssertEqual(inode(file), original)
    }

    // MARK: ReactiveCocoa bug 1: a stale remembered value

    /// Every combination of 1–4 toggles on one side followed by a change to either value on the
    /// other side: the file always ends showing the bus value.
    func testTogglesOnOneSideThenAChangeOnTheOtherAlwaysEndInAgreement() async throws {
        try await client.create("settings.someBoolKey", "b", default: .boolean(false))
        let file = path("switch")
        let bind = try await bindFile("settings.someBoolKey", file, expecting: "false")
        var fileValue = false
        for toggles in 1...4 {
            for final in [true, false] {
                // The user flips the switch (the file) `toggles` times; the defaults follow.
                for _ in 0..<toggles {
                    fileValue.toggle()
                    echo(String(fileValue), to: file)
                    await expect({ await waitForBus("settings.someBoolKey", .boolean(fileValue)) }, "\(toggles) local toggles: bus did not follow; stderr: \(bind.stderr)")
                }
                // Then code sets the defaults value.
                try await client.set("settings.someBoolKey", .boolean(final))
                await expect({ await waitForFile(file, String(final)) }, "\(toggles) local toggles then bus := \(final): file shows \(read(file) ?? "nil")")
                fileValue = final

                // The mirror image: the bus toggles, then the file changes.
                var busValue = final
                for _ in 0..<toggles {
                    busValue.toggle()
                    try await client.set("settings.someBoolKey", .boolean(busValue))
                    await expect({ await waitForFile(file, String(busValue)) }, "\(toggles) bus toggles: file did not follow")
                }
                echo(String(final), to: file)
                await expect({ await waitForBus("settings.someBoolKey", .boolean(final)) }, "\(toggles) bus toggles then file := \(final): bus did not follow")
                await expect({ await waitForFile(file, String(final)) }, "")
                fileValue = final
            }
        }
    }

    // MARK: ReactiveCocoa bug 2: a stuck "ignore the next update" flag

    func testSameValueLocalWriteDoesNotSwallowNextRemoteChange() async throws {
        try await client.create("settings.someBoolKey", "b", default: .boolean(true))
        let file = path("switch")
        let bind = try await bindFile("settings.someBoolKey", file, expecting: "true", ["--verbose"])
        let recorder = try await recordAll()
        // A write of the value the bus already has: no Set, so no notification comes back.
        let before = traces(bind, "which the bus holds; nothing sent")
        echo("true", to: file)
        try replace(file, with: "true")
        await awaitTrace(bind, "which the bus holds; nothing sent", after: before)
        try await client.set("settings.someBoolKey", .boolean(false))
        await expect({ await waitForFile(file, "false") }, "the remote change was swallowed: \(read(file) ?? "nil"); \(bind.stderr)")
        let announced = try await changes(of: "settings.someBoolKey", in: recorder, idle: bind)
        XCTAssertEqual(announced, [.boolean(false)])
    }

    // MARK: Transforms

    func testOnOffTextMapsToOneZeroBothWays() async throws {
        try await client.create("device.power", "s", default: .string("0"))
        let file = path("power")
        let bind = try await bindFile("device.power", file, expecting: "Off",
                                      ["--map", #"value == "1" ? "On" : "Off""#, "--unmap", #"value == "On" ? "1" : "0""#])
        let recorder = try await recordAll()
        try await client.set("device.power", .string("1"))
        await expect({ await waitForFile(file, "On") }, bind.stderr)
        echo("Off", to: file)
        await expect({ await waitForBus("device.power", .string("0")) }, bind.stderr)
        try replace(file, with: "On")
        await expect({ await waitForBus("device.power", .string("1")) }, bind.stderr)
        let announced = try await changes(of: "device.power", in: recorder, idle: bind)
        XCTAssertEqual(announced, [.string("1"), .string("0"), .string("1")])
        XCTAssertEqual(read(file), "On")
    }

    func testTransformsThatAreNotInversesDoNotLoop() async throws {
        try await client.create("loop.n", "i", default: .int32(0))
        let file = path("loop")
        let bind = try await bindFile("loop.n", file, expecting: "1", ["--map", "value + 1", "--unmap", "int(value)", "--verbose"])
        let recorder = try await recordAll()
        echo("5", to: file)
        await expect({ await waitForBus("loop.n", .int32(5)) }, bind.stderr)
        // The file is where 5 came from: it is not rewritten to 6, which would come back as 6, …
        await awaitTrace(bind, "the bus holds what was sent; nothing written back")
        let announced = try await changes(of: "loop.n", in: recorder, idle: bind)
        XCTAssertEqual(announced, [.int32(5)], bind.stderr)
        XCTAssertEqual(read(file), "5")
        try await client.set("loop.n", .int32(9))
        await expect({ await waitForFile(file, "10") }, bind.stderr)
    }

    func testRejectedLocalValueIsReportedAndTheFileGoesBackToTheBusValue() async throws {
        try await client.create("settings.volume", "i", default: .int32(50), options: ["minimum": .variant(.int32(0)), "maximum": .variant(.int32(100))])
        let file = path("volume")
        let bind = try await bindFile("settings.volume", file, expecting: "50")
        echo("500", to: file)
        await expect({ await waitForFile(file, "50") }, "out-of-range value not reverted: \(read(file) ?? "nil")")
        XCTAssertTrue(bind.stderr.contains("OutOfRange") || bind.stderr.contains("500"), bind.stderr)
        echo("loud", to: file)
        await expect({ await waitForFile(file, "50") }, "unparsable value not reverted: \(read(file) ?? "nil")")
        echo("70", to: file)
        await expect({ await waitForBus("settings.volume", .int32(70)) }, bind.stderr)
    }

    // MARK: Directions

    func testDirectionFromOnlyFollowsTheBus() async throws {
        try await client.create("ui.theme", "s", default: .string("dark"))
        let file = path("theme")
        let bind = try await bindFile("ui.theme", file, expecting: "dark", ["--direction", "from", "--verbose"])
        echo("light", to: file)
        try await client.set("ui.theme", .string("blue"))
        await expect({ await waitForFile(file, "blue") }, bind.stderr)
        echo("green", to: file)
        await awaitTrace(bind, #"(now "green") changed; not sent (--direction from)"#)
        let value = try await client.get("ui.theme")
        XCTAssertEqual(value, .string("blue"), "a local edit reached the bus with --direction from")
    }

    func testDirectionToOnlyDrivesTheBus() async throws {
        try await client.create("ui.theme", "s", default: .string("dark"))
        let file = path("theme")
        echo("light", to: file)
        let bind = try bind("ui.theme", ["--file", file, "--direction", "to", "--verbose"])
        await expect({ await waitForBus("ui.theme", .string("light")) }, "the local value is sent at the start: \(bind.stderr)")
        try await client.set("ui.theme", .string("blue"))
        echo("green", to: file)
        await expect({ await waitForBus("ui.theme", .string("green")) }, bind.stderr)
        try await client.set("ui.theme", .string("red"))
        await awaitTrace(bind, #"ui.theme is "red"; not written (--direction to)"#)
        XCTAssertEqual(read(file), "green", "a bus change reached the file with --direction to")
    }

    // MARK: Line endpoints

    /// `propctl bind KEY --stdio OPTIONS…` reading a FIFO, and the FIFO's write end (the
    /// caller closes it).
    private func bindStdio(_ key: String, _ options: [String] = []) throws -> (process: ChildProcess, input: Int32) {
        let fifo = path("in")
        XCTAssertEqual(mkfifo(fifo, 0o600), 0)
        let process = try ChildProcess("/bin/sh", ["-c", "program=$0 address=$1 key=$2 fifo=$3; shift 3; exec \"$program\" --address \"$address\" bind \"$key\" --stdio \"$@\" < \"$fifo\"",
                                                   BuildProducts.propctl, bus.address, key, fifo] + options, environment: bus.environment)
        binds.append(process)
        // O_RDWR does not wait for the reader, and keeps the pipe open between lines.
        return (process, open(fifo, O_RDWR))
    }

    func testStdioSpeaksOneLinePerChangeWithoutEcho() async throws {
        try await client.create("viewmodel.searchText", "s", default: .string("initial"))
        let (process, input) = try bindStdio("viewmodel.searchText")
        defer { close(input) }
        func say(_ line: String) { _ = Array((line + "\n").utf8).withUnsafeBytes { write(input, $0.baseAddress, $0.count) } }
        func lines() -> [String] { process.stdout.split(separator: "\n").map(String.init) }

        await expect({ await eventually(timeout: 10) { lines() == ["initial"] } }, "stdout: \(process.stdout) stderr: \(process.stderr)")
        let recorder = try await recordAll()
        say("typed")
        await expect({ await waitForBus("viewmodel.searchText", .string("typed")) }, process.stderr)
        try await client.set("viewmodel.searchText", .string("from code"))
        await expect({ await eventually { lines() == ["initial", "from code"] } }, "stdout: \(process.stdout)")
        say("from code")  // the other side repeating the current value is not a change
        say("again")
        await expect({ await waitForBus("viewmodel.searchText", .string("again")) }, "")
        let announced = try await changes(of: "viewmodel.searchText", in: recorder)
        XCTAssertEqual(announced, [.string("typed"), .string("from code"), .string("again")])
        XCTAssertEqual(lines(), ["initial", "from code"], "stdout carries only bus values")
    }

    /// A line is bounded (`--max-line`, 8 MiB by default). A 16 MiB line
    /// was buffered whole (and the buffer rescanned for its end after every read); now it is
    /// dropped with an error naming the limit, and the next line arrives.
    func testStdioDropsALineLongerThanTheBoundAndTheNextOneArrives() async throws {
        try await client.create("viewmodel.searchText", "s", default: .string("initial"))
        let (process, input) = try bindStdio("viewmodel.searchText", ["--direction", "to"])
        defer { close(input) }
        // Written from a thread of its own: the pipe holds 64 KiB, and propctl reads as it goes.
        let bytes = Array(repeating: UInt8(ascii: "x"), count: 16 << 20) + Array("\nshort\n".utf8)
        let writer = Thread {
            var offset = 0
            while offset < bytes.count {
                let count = bytes[offset...].withUnsafeBytes { write(input, $0.baseAddress, $0.count) }
                guard count > 0 else { return }
                offset += count
            }
        }
        writer.start()
        await expect({ await waitForBus("viewmodel.searchText", .string("short")) }, "stderr: \(process.stderr)")
        XCTAssertTrue(process.stderr.contains("longer than \(8 << 20) bytes (--max-line)"), "stderr: \(process.stderr)")
        XCTAssertFalse(process.stderr.contains("LimitsExceeded") || process.stderr.contains("the limit is"), "the long line reached the daemon: \(process.stderr)")
    }

    func testExecCoprocessLinesAreLocalChangesAndBusChangesGoToItsStdin() async throws {
        try await client.create("viewmodel.searchText", "s", default: .string("initial"))
        let log = path("log")
        // Logs the first value it is told and answers with its own, then logs and echoes every
        // line it is told (an echo must not come back to the bus).
        let script = "read line; echo \"$line\" >> '\(log)'; echo hello; while read line; do echo \"$line\" >> '\(log)'; echo \"$line\"; done"
        let process = try bind("viewmodel.searchText", ["--exec", script])
        await expect({ await waitForBus("viewmodel.searchText", .string("hello")) }, process.stderr)
        await expect({ await eventually { self.read(log) == "initial" } }, "log: \(read(log) ?? "nil")")
        let recorder = try await recordAll()
        try await client.set("viewmodel.searchText", .string("from code"))
        await expect({ await eventually { self.read(log) == "initial\nfrom code" } }, "log: \(read(log) ?? "nil"); \(process.stderr)")
        let announced = try await changes(of: "viewmodel.searchText", in: recorder)
        XCTAssertEqual(announced, [.string("from code")], "the coprocess's echo came back to the bus")
    }

    func testExecArgvAndTheBindingEndsWithTheCoprocess() async throws {
        try await client.create("viewmodel.count", "u", default: .uint32(0))
        let process = try bind("viewmodel.count", ["--exec", "/bin/sh", "--", "-c", "read first; echo 7"])
        await expect({ await waitForBus("viewmodel.count", .uint32(7)) }, process.stderr)
        let ended = await process.waitForExit(timeout: 10)
        XCTAssertEqual(ended, .exited(0), process.stderr)
    }

    // MARK: Daemon restarts

    func testLocalChangeWhileTheDaemonIsAwayIsAppliedWhenItIsBack() async throws {
        try await client.create("ui.theme", "s", default: .string("dark"))
        let file = path("theme")
        let bind = try await bindFile("ui.theme", file, expecting: "dark", ["--verbose"])
        try await client.set("ui.theme", .string("blue"))
        await expect({ await waitForFile(file, "blue") }, "")
        await daemon.stop()
        _ = await eventually { !((try? await self.client.nameHasOwner()) ?? true) }
        // The binding's own marker that it knows the daemon is away, not a guess at how long
        // that takes.
        await expect({ await eventually { bind.stderr.contains("waiting for it to come back") } }, bind.stderr)
        echo("changed while away", to: file)
        // The binding has noticed the change before the daemon is back.
        await awaitTrace(bind, #"(now "changed while away") changed while propbusd is away"#)
        daemon = try await Daemon.start(on: bus, arguments: daemonArguments, watcher: client)
        await expect({ await waitForBus("ui.theme", .string("changed while away")) }, bind.stderr)
        XCTAssertEqual(read(file), "changed while away")
        // And the binding goes on.
        try await client.set("ui.theme", .string("after"))
        await expect({ await waitForFile(file, "after") }, bind.stderr)
    }

    func testFileIsResynchronizedFromTheBusAfterTheDaemonRestarts() async throws {
        try await client.create("ui.theme", "s", default: .string("dark"))
        let file = path("theme")
        let bind = try await bindFile("ui.theme", file, expecting: "dark")
        try await client.set("ui.theme", .string("blue"))
        await expect({ await waitForFile(file, "blue") }, "")
        // A daemon that forgot everything: the key comes back with another value.
        try await restartDaemon(arguments: ["--in-memory"])
        try await client.create("ui.theme", "s", default: .string("fresh"))
        await expect({ await waitForFile(file, "fresh") }, "file shows \(read(file) ?? "nil"); \(bind.stderr)")
        echo("edited", to: file)
        await expect({ await waitForBus("ui.theme", .string("edited")) }, bind.stderr)
        XCTAssertTrue(bind.isRunning)
    }

    // MARK: Exit codes

    func testUnknownKeyAndMissingEndpointFail() async throws {
        let unknown = try await tool(BuildProducts.propctl, ["--address", bus.address, "bind", "no.such", "--file", path("x")])
        XCTAssertEqual(unknown.status, 1, "\(unknown)")
        XCTAssertTrue(unknown.stderr.contains("UnknownKey") || unknown.stderr.contains("no.such"), unknown.stderr)
        let noEndpoint = try await tool(BuildProducts.propctl, ["--address", bus.address, "bind", "a.b"])
        XCTAssertEqual(noEndpoint.status, 64, "\(noEndpoint)")
        let badExpression = try await tool(BuildProducts.propctl, ["--address", bus.address, "bind", "a.b", "--stdio", "--map", "value +"])
        XCTAssertEqual(badExpression.status, 64, "\(badExpression)")
    }

    func testNoDaemonIsServiceUnavailable() async throws {
        await daemon.stop()
        _ = await eventually { !((try? await self.client.nameHasOwner()) ?? true) }
        let result = try await tool(BuildProducts.propctl, ["--address", bus.address, "bind", "a.b", "--file", path("x")])
        XCTAssertEqual(result.status, 69, "\(result)")
    }
}
