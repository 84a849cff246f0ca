import JSON
import XCTest
@testable import Etcd

/// The gateway's encodings, without an etcd: base64, proto3 JSON, prefix ends, endpoints.
final class GatewayEncodingTests: XCTestCase {
    func testBase64RoundTripsEveryLengthAndRejectsGarbage() {
        for length in 0..<70 {
            let bytes = (0..<length).map { UInt8(truncatingIfNeeded: $0 &* 37 &+ 11) }
            XCTAssertEqual(Base64.decode(Base64.encode(bytes)), bytes, "length \(length)")
        }
        XCTAssertEqual(Base64.encode(Array("foo".utf8)), "Zm9v")
        XCTAssertEqual(Base64.encode(Array("fo".utf8)), "Zm8=")
        XCTAssertEqual(Base64.encode(Array("f".utf8)), "Zg==")
        XCTAssertEqual(Base64.decode("Zg"), Array("f".utf8))
        XCTAssertNil(Base64.decode("Zm9v!"))
        XCTAssertNil(Base64.decode("Z=m9"))
    }

    func testProto3JSONDefaultsAndInt64Strings() throws {
        let json = try JSONValue.gatewayMessage(Array(#"{"header":{"revision":"9223372036854775807","member_id":"13668033151171901709"},"kvs":[{"key":"Zm9v","mod_revision":"2"}]}"#.utf8))
        let range = try RangeResponse(json: json)
        XCTAssertEqual(range.header.revision, Int64.max)
        XCTAssertEqual(range.header.memberID, 13668033151171901709)
        XCTAssertEqual(range.count, 0, "an absent count is 0")
        XCTAssertFalse(range.more)
        XCTAssertEqual(range.kvs.first?.value, [], "an absent value is empty")
        XCTAssertEqual(range.kvs.first?.version, 0)
        let failed = try TxnResponse(json: JSONValue.gatewayMessage(Array(#"{"header":{"revision":"4"}}"#.utf8)))
        XCTAssertFalse(failed.succeeded, "a failed txn has no succeeded field")
        XCTAssertEqual(failed.responses, [])
    }

    func testPrefixEndFollowsEtcd() {
        XCTAssertEqual(RangeRequest.prefixEnd(of: Array("abc".utf8)), Array("abd".utf8))
        XCTAssertEqual(RangeRequest.prefixEnd(of: [0x61, 0xFF, 0xFF]), [0x62])
        XCTAssertEqual(RangeRequest.prefixEnd(of: [0xFF]), [0])
        XCTAssertEqual(RangeRequest.prefixEnd(of: []), [0])
    }

    func testEndpointsAcceptURLsAndHostPortAndRejectTheRest() throws {
        XCTAssertEqual(try EtcdClient(endpoints: ["127.0.0.1:2379", "http://h:1/", "https://[::1]:2379"]).endpoints,
                       ["http://127.0.0.1:2379", "http://h:1", "https://[::1]:2379"])
        var tls = EtcdOptions()
        tls.caFile = "/etc/ca.pem"
        XCTAssertEqual(try EtcdClient(endpoints: ["h:2379"], options: tls).endpoints, ["https://h:2379"])
        for bad in ["ftp://h:1", "h", "h:0", "h:99999", ":2379", "http://h:1/path"] {
            XCTAssertThrowsError(try EtcdClient(endpoints: [bad]), bad) { error in
                XCTAssertEqual((error as! EtcdError).code, .invalidRequest)
            }
        }
        XCTAssertThrowsError(try EtcdClient(endpoints: []))
    }

    func testTxnBodyWriterWritesTheTextOfTheJSONTreeByteForByte() {
        let key = Array("/fleet/keys/a.b".utf8), binary: [UInt8] = [0, 0xFF, 0x7F, 0x22, 0x5C, 10]
        var range = RangeRequest(key: key, prefix: true, revision: 7)
        range.limit = 3
        range.countOnly = true
        range.serializable = true
        range.minModRevision = -2
        let compares: [Compare] = [
            .modRevision(of: key, is: 0), Compare(key, .greater, .version(Int64.max)), Compare(binary, .less, .createRevision(-1)),
            Compare(key, .notEqual, .value(binary)), Compare(key, .equal, .lease(42), rangeEnd: [0]), Compare([], .equal, .value([])),
        ]
        let success: [RequestOp] = [.put(key, binary), .put(PutRequest(key: key, value: [], lease: 9, prevKV: true)),
                                    .delete(key), .deleteRange(DeleteRangeRequest(key: key, prefix: true, prevKV: true))]
        let failure: [RequestOp] = [.get(key), .range(range)]
        let shapes: [([Compare], [RequestOp], [RequestOp])] = [
            (compares, success, failure), ([], success, []), (compares, [], failure), (compares, [], []), ([], [], failure), ([], [], []),
        ]
        for (c, s, f) in shapes {
            XCTAssertEqual(String(decoding: TxnBodyWriter.body(compares: c, success: s, failure: f), as: UTF8.self),
                           Self.txnTree(compares: c, success: s, failure: f).text)
        }
    }

    /// A txn's request as the gateway's JSON tree, built from the values' `json`: the text
    /// ``TxnBodyWriter`` must write byte for byte.
    private static func txnTree(compares: [Compare], success: [RequestOp], failure: [RequestOp]) -> JSONValue {
        var members: [(String, JSONValue)] = []
        if !compares.isEmpty { members.append(("compare", .array(compares.map(\.json)))) }
        if !success.isEmpty { members.append(("success", .array(success.map(\.json)))) }
        if !failure.isEmpty { members.append(("failure", .array(failure.map(\.json)))) }
        return .object(members)
    }
}
