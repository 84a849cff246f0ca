import XCTest
@testable import propctl

/// `propctl bind --stdio/--exec` looks at every byte once and bounds a
/// line. The work is counted (``LineSplitter/scannedBytes``), not timed.
final class LineSplitterTests: XCTestCase {
    /// Feeds `bytes` in reads of `chunk` bytes, as the endpoint's reader does, then the end.
    private func split(_ bytes: [UInt8], chunk: Int = 16 * 1024, maximumLength: Int) -> (events: [LineSplitter.Event], scanned: Int) {
        var splitter = LineSplitter(maximumLength: maximumLength)
        var events: [LineSplitter.Event] = []
        var offset = 0
        while offset < bytes.count {
            let end = min(offset + chunk, bytes.count)
            events += bytes[offset..<end].withUnsafeBytes { splitter.append($0) }
            offset = end
        }
        events += splitter.finish()
        return (events, splitter.scannedBytes)
    }

    func testALongLineIsScannedOnceWhetherKeptOrDropped() {
        let input = Array(repeating: UInt8(ascii: "x"), count: 16 << 20) + Array("\nshort\n".utf8)
        // Within the bound: kept whole. Rescanning the buffer after every 16 KiB read looked
        // at ~8 TB for this; each byte is looked at once.
        let kept = split(input, maximumLength: 32 << 20)
        XCTAssertEqual(kept.scanned, input.count)
        XCTAssertEqual(kept.events, [.line(Array(input[..<(16 << 20)])), .line(Array("short".utf8))])
        // Past the bound: dropped and reported with its length, and the next line still comes.
        let dropped = split(input, maximumLength: 8 << 20)
        XCTAssertEqual(dropped.scanned, input.count)
        XCTAssertEqual(dropped.events, [.tooLong(length: 16 << 20), .line(Array("short".utf8))])
    }

    func testManyShortLinesInOneReadAreScannedOnce() {
        let input = Array(String(repeating: "ab\n", count: 100_000).utf8)
        let result = split(input, chunk: input.count, maximumLength: 8)
        XCTAssertEqual(result.scanned, input.count)
        XCTAssertEqual(result.events.count, 100_000)
        XCTAssertEqual(Set(result.events), [.line(Array("ab".utf8))])
    }

    func testLinesSplitAcrossReadsAndTheBoundIsExact() {
        let input = Array("12345678\n123456789\nend".utf8)
        let result = split(input, chunk: 3, maximumLength: 8)
        XCTAssertEqual(result.events, [.line(Array("12345678".utf8)), .tooLong(length: 9), .line(Array("end".utf8))])
        XCTAssertEqual(result.scanned, input.count)
        let lastTooLong = split(Array("123456789".utf8), chunk: 4, maximumLength: 8)
        XCTAssertEqual(lastTooLong.events, [.tooLong(length: 9)], "an overlong last line without its newline")
    }
}
