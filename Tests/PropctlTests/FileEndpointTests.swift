import Dispatch
import Foundation
import Glibc
import XCTest
@testable import propctl

/// `propctl bind --file`'s endpoint on real files in a temporary directory, on a queue of its
/// own, without a bus: what it hands its channel as the local value when a program changes the
/// file at a chosen moment.
final class FileEndpointTests: XCTestCase {
    private var directory: String!
    /// The bound file, "start" when the endpoint starts.
    private var file: String!
    private let queue = DispatchQueue(label: "FileEndpointTests")
    private let channel = Channel()
    private var endpoint: FileEndpoint!
    /// Every endpoint started, stopped in tearDown.
    private var endpoints: [FileEndpoint] = []

    override func setUpWithError() throws {
        directory = FileManager.default.temporaryDirectory.appendingPathComponent("propctl-file-endpoint-\(getpid())-\(UUID().uuidString)").path
        try FileManager.default.createDirectory(atPath: directory, withIntermediateDirectories: true)
        file = directory + "/text"
        XCTAssertTrue(FileManager.default.createFile(atPath: file, contents: Data("start\n".utf8)))
        endpoint = try startEndpoint(file, recordingInto: channel)
    }

    override func tearDownWithError() throws {
        queue.sync { for endpoint in endpoints { endpoint.stop() } }
        if let directory { try? FileManager.default.removeItem(atPath: directory) }
    }

    /// What the endpoint hands its channel, in order, and the moment a test acts in; touched on
    /// the endpoint's queue only.
    private final class Channel {
        var values: [String?] = []
        /// Runs inside every delivery, before the channel takes its value.
        var beforeTaking: (() -> Void)?
    }

    /// Starts an endpoint on `path` whose deliveries `channel` records.
    private func startEndpoint(_ path: String, recordingInto channel: Channel) throws -> FileEndpoint {
        let endpoint = FileEndpoint(path: path, inPlace: false)
        try queue.sync {
            try endpoint.start(on: queue, changed: { value in
                channel.beforeTaking?()
                // What ClientChannel sends for a change.
                channel.values.append(value)
            }, ended: { _ in })
        }
        endpoints.append(endpoint)
        return endpoint
    }

    /// Polls `condition` on `queue` until it holds (10 s at most): a barrier, not a timing.
    private func eventually(on queue: DispatchQueue, _ condition: () -> Bool) -> Bool {
        for _ in 0..<10_000 {
            if queue.sync(execute: condition) { return true }
            usleep(1_000)
        }
        return false
    }

    /// Writes `text` and a newline to `descriptor` and closes it: a writer's last step.
    private func finish(_ descriptor: Int32, writing text: String, file: StaticString = #filePath, line: UInt = #line) {
        let bytes = Array((text + "\n").utf8)
        XCTAssertEqual(bytes.withUnsafeBytes { Glibc.write(descriptor, $0.baseAddress, $0.count) }, bytes.count, file: file, line: line)
        close(descriptor)
    }

    /// Waits until `endpoint` has handed `value` over last and has nothing left to deliver, then
    /// asserts that `halfWay`, what the file showed before its writer finished, never was.
    private func expectHandedOver(_ value: String, never halfWay: String, from endpoint: FileEndpoint, to channel: Channel,
                                  _ what: String, file: StaticString = #filePath, line: UInt = #line) {
        XCTAssertTrue(eventually(on: queue) { channel.values.last == value && endpoint.isIdle },
                      "never handed over \"\(value)\": \(queue.sync { channel.values })", file: file, line: line)
        let values = queue.sync { channel.values }
        XCTAssertFalse(values.contains(halfWay), "\(what): \(values)", file: file, line: line)
    }

    /// `rm f; echo reborn > f`, with the creator's open at the worst moment: just after the
    /// endpoint looked at the deleted name (nothing there, no event since) and handed the change
    /// over. The creator has opened (truncated) the new file but not written yet, so what the
    /// file shows then is no value; the channel sent it as "" before "reborn" when it read the
    /// file again instead of taking what the endpoint had looked at (a ClientChannelTests flake).
    func testAFileCreatedAgainJustAfterItsDeletionIsHandedOverIsNotSentEmpty() throws {
        let file = file!, channel = channel
        var creator: Int32 = -1
        queue.sync {
            // Once the name is gone: a delivery during the unlink may still see the old file.
            channel.beforeTaking = {
                if creator < 0, access(file, F_OK) != 0 { creator = open(file, O_WRONLY | O_CREAT | O_TRUNC, 0o644) }
            }
        }
        XCTAssertEqual(unlink(file), 0)
        XCTAssertTrue(eventually(on: queue) { creator >= 0 }, "the deletion was never handed over")
        finish(creator, writing: "reborn")
        expectHandedOver("reborn", never: "", from: endpoint, to: channel, "a half-created file was handed over as a value")
    }

    /// propctl's own write, and a program that opens the new file at once and starts changing
    /// it before propctl handles the rename: on ext4 a shell's `>` truncates visibly a while
    /// before its IN_MODIFY is queued (the blocks are freed in between), and its IN_OPEN came
    /// first, in the same batch as the rename. A shared mapping stands for that moment here: its
    /// writes send no event at all. The rename's delivery read the half-changed file as the
    /// value (a ClientChannelTests flake under load: "" before "slow").
    func testAFileOpenedByAWriterAfterOurRenameIsNotReadHalfWayWhenTheRenameIsDelivered() throws {
        let file = file!, endpoint = endpoint!
        var writer: Int32 = -1
        var mapping: UnsafeMutableRawPointer?
        try queue.sync {
            // All before the endpoint reads an event: it runs on this queue.
            XCTAssertTrue(try endpoint.write("saved"))
            writer = open(file, O_RDWR)
            XCTAssertGreaterThanOrEqual(writer, 0)
            let mapped = mmap(nil, 5, PROT_READ | PROT_WRITE, MAP_SHARED, writer, 0)
            XCTAssertNotEqual(mapped, MAP_FAILED)
            mapping = mapped
            mapped?.copyMemory(from: Array("ne".utf8), byteCount: 2)
        }
        // The barrier: the endpoint has handled the rename and the open, one way or the other.
        XCTAssertTrue(eventually(on: queue) { !channel.values.isEmpty || !endpoint.isIdle }, "the rename was never handled")
        (mapping! + 2).copyMemory(from: Array("wer".utf8), byteCount: 3)
        munmap(mapping, 5)
        close(writer)
        expectHandedOver("newer", never: "neved", from: endpoint, to: channel, "the file was read half-way through a write")
    }

    /// The bound name is a symlink, and its target is deleted and created again: the target's
    /// directory is not watched, so no IN_CREATE ever says a creator holds the new file; the
    /// deletion's read found the new, still empty file and delivered "". (Without a symlink
    /// the same read can come while the creator is still in its open, before its IN_CREATE is
    /// queued: ext4 makes the name visible, then finishes its journal handle.)
    func testASymlinksTargetCreatedAgainIsNotReadBeforeItsCreatorCloses() throws {
        let elsewhere = directory + "/elsewhere"
        XCTAssertEqual(mkdir(elsewhere, 0o755), 0)
        let target = elsewhere + "/target"
        XCTAssertTrue(FileManager.default.createFile(atPath: target, contents: Data("start\n".utf8)))
        let link = directory + "/link"
        XCTAssertEqual(symlink(target, link), 0)
        let channel = Channel()
        let endpoint = try startEndpoint(link, recordingInto: channel)
        var creator: Int32 = -1
        queue.sync {
            // All before the endpoint reads an event: it runs on this queue.
            XCTAssertEqual(unlink(target), 0)
            creator = open(target, O_WRONLY | O_CREAT | O_TRUNC, 0o644)
        }
        XCTAssertGreaterThanOrEqual(creator, 0)
        // The barrier: the endpoint has handled the deletion, one way or the other.
        XCTAssertTrue(eventually(on: queue) { !channel.values.isEmpty || !endpoint.isIdle }, "the deletion was never handled")
        finish(creator, writing: "reborn")
        expectHandedOver("reborn", never: "", from: endpoint, to: channel, "the new target was read before its creator wrote it")
    }
}
