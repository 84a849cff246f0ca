import DBusValues
import PropBus
import XCTest

/// docs/security.md's rules as a pure function of the caller's credentials: no bus, no user database.
final class AccessPolicyTests: XCTestCase {
    // MARK: Helpers

    private let accounts = Accounts.table(users: ["root": 0, "alice": 1000, "bob": 1001, "nobody": 65534, "propbus": 998],
                                          groups: ["propbus": 990, "audio": 29, "nogroup": 65534, "1234": 77])
    private var policy: AccessPolicy { .enforcing(daemonUserID: 998, accounts: accounts) }

    private let root = Credentials(userID: 0, groupIDs: [0])
    private let daemonUser = Credentials(userID: 998, groupIDs: [998])
    private let alice = Credentials(userID: 1000, groupIDs: [1000, 29])
    private let member = Credentials(userID: 1001, groupIDs: [1001, 990])
    private let nobody = Credentials(userID: 65534, groupIDs: [65534])

    private func deniedMessage(_ body: () throws(PropBusError) -> Void, file: StaticString = #filePath, line: UInt = #line) -> String? {
        do {
            try body()
            XCTFail("allowed", file: file, line: line)
            return nil
        } catch {
            XCTAssertEqual(error.code, .accessDenied, file: file, line: line)
            XCTAssertEqual(error.name, "org.freedesktop.DBus.Error.AccessDenied", file: file, line: line)
            return error.message
        }
    }

    // MARK: Defaults

    func testOpenPolicyAllowsEveryoneEverythingEvenUnknownCallers() {
        let open = AccessPolicy.open
        XCTAssertTrue(open.mayWrite(writers: nil, caller: nobody))
        XCTAssertTrue(open.mayWrite(writers: ["alice"], caller: nobody))
        XCTAssertTrue(open.mayRead(writers: ["alice"], secret: true, caller: nil))
        XCTAssertNoThrow(try open.checkWrite("ui.switch.on", writers: [], caller: nil))
    }

    func testWritesDefaultToRootTheDaemonsUserAndThePropbusGroup() {
        XCTAssertTrue(policy.mayWrite(writers: nil, caller: root))
        XCTAssertTrue(policy.mayWrite(writers: nil, caller: daemonUser))
        XCTAssertTrue(policy.mayWrite(writers: nil, caller: member))
        XCTAssertFalse(policy.mayWrite(writers: nil, caller: alice))
        XCTAssertFalse(policy.mayWrite(writers: nil, caller: nobody))
    }

    func testWithoutAPropbusGroupOnlyRootAndTheDaemonWrite() {
        let noGroup = AccessPolicy.enforcing(daemonUserID: 0, accounts: .table(users: [:], groups: [:]))
        XCTAssertNil(noGroup.writerGroup)
        XCTAssertTrue(noGroup.mayWrite(writers: nil, caller: root))
        XCTAssertFalse(noGroup.mayWrite(writers: nil, caller: member))
        XCTAssertEqual(noGroup.describeWriters(nil), "root only (there is no group propbus)")
    }

    /// `writers ["root"]` (or uid 0, or the daemon's user) names someone who writes anyway: said once.
    func testWritersThatNameRootOrTheDaemonAreNotNamedTwice() {
        XCTAssertEqual(policy.describeWriters(["root"]), "root and the daemon's user (uid 998)")
        XCTAssertEqual(policy.describeWriters(["0", "alice", "alice"]), "root, the daemon's user (uid 998) and alice")
        let asRoot = AccessPolicy.enforcing(daemonUserID: 0, accounts: accounts)
        XCTAssertEqual(asRoot.describeWriters(["root"]), "root only")
        XCTAssertEqual(deniedMessage { () throws(PropBusError) in try asRoot.checkWrite("a.b", writers: ["root"], caller: nobody) },
                       "uid 65534 may not write a.b; writers are root only")
    }

    func testACallerWhoseCredentialsAreUnknownIsNotPrivileged() {
        XCTAssertFalse(policy.mayWrite(writers: nil, caller: nil))
        XCTAssertFalse(policy.mayWrite(writers: ["nobody"], caller: nil))
        XCTAssertTrue(policy.mayRead(writers: nil, secret: false, caller: nil))
        XCTAssertEqual(deniedMessage { () throws(PropBusError) in try policy.checkWrite("a.b", writers: nil, caller: nil) },
                       "a caller of unknown uid may not write a.b; writers are root, the daemon's user (uid 998) and group propbus")
    }

    // MARK: writers

    func testWritersByUserNameReplaceTheDefaultSet() {
        XCTAssertTrue(policy.mayWrite(writers: ["alice"], caller: alice))
        XCTAssertFalse(policy.mayWrite(writers: ["alice"], caller: member), "writers narrows: the propbus group no longer counts")
        XCTAssertFalse(policy.mayWrite(writers: [], caller: member))
    }

    func testRootAndTheDaemonWriteWhateverWritersSays() {
        XCTAssertTrue(policy.mayWrite(writers: [], caller: root))
        XCTAssertTrue(policy.mayWrite(writers: ["alice"], caller: daemonUser))
    }

    func testWritersByGroupMatchAnyOfTheCallersGroups() {
        XCTAssertTrue(policy.mayWrite(writers: ["@audio"], caller: alice))
        XCTAssertTrue(policy.mayWrite(writers: ["@propbus"], caller: member))
        XCTAssertFalse(policy.mayWrite(writers: ["@audio"], caller: member))
        XCTAssertTrue(policy.mayWrite(writers: ["@nogroup"], caller: nobody))
    }

    func testNumericWritersAreUidsAndNumericGroupsAreGidsUnlessAGroupHasThatName() {
        XCTAssertTrue(policy.mayWrite(writers: ["1000"], caller: alice))
        XCTAssertFalse(policy.mayWrite(writers: ["1001"], caller: alice))
        XCTAssertTrue(policy.mayWrite(writers: ["@29"], caller: alice), "an unnamed @29 is gid 29")
        XCTAssertFalse(policy.mayWrite(writers: ["@1234"], caller: Credentials(userID: 5, groupIDs: [1234])),
                       "a group named 1234 (gid 77) wins over the number")
        XCTAssertTrue(policy.mayWrite(writers: ["@1234"], caller: Credentials(userID: 5, groupIDs: [77])))
    }

    func testNamesThatDoNotResolveMatchNobody() {
        XCTAssertFalse(policy.mayWrite(writers: ["mallory", "@wheel", "@", "", "-1", "99999999999"], caller: alice))
        XCTAssertFalse(policy.mayWrite(writers: ["mallory"], caller: nobody))
    }

    // MARK: secret

    func testSecretPropertiesAreReadableOnlyByTheirWriters() {
        XCTAssertTrue(policy.mayRead(writers: nil, secret: false, caller: nobody))
        XCTAssertFalse(policy.mayRead(writers: nil, secret: true, caller: nobody))
        XCTAssertTrue(policy.mayRead(writers: nil, secret: true, caller: member))
        XCTAssertTrue(policy.mayRead(writers: ["alice"], secret: true, caller: alice))
        XCTAssertFalse(policy.mayRead(writers: ["alice"], secret: true, caller: member))
        XCTAssertTrue(policy.mayRead(writers: [], secret: true, caller: root))
    }

    // MARK: Messages

    func testDenialsNameTheKeyTheCallerAndTheWriters() {
        XCTAssertEqual(deniedMessage { () throws(PropBusError) in try policy.checkWrite("ui.switch.on", writers: nil, caller: nobody) },
                       "uid 65534 may not write ui.switch.on; writers are root, the daemon's user (uid 998) and group propbus")
        let asRoot = AccessPolicy.enforcing(daemonUserID: 0, accounts: accounts)
        XCTAssertEqual(deniedMessage { () throws(PropBusError) in try asRoot.checkWrite("ui.switch.on", writers: nil, caller: nobody) },
                       "uid 65534 may not write ui.switch.on; writers are root and group propbus")
        XCTAssertEqual(deniedMessage { () throws(PropBusError) in try asRoot.checkWrite("a.b", writers: ["alice", "@audio"], caller: nobody) },
                       "uid 65534 may not write a.b; writers are root, alice and @audio")
        XCTAssertEqual(deniedMessage { () throws(PropBusError) in try asRoot.checkWrite("a.b", writers: [], caller: alice) },
                       "uid 1000 may not write a.b; writers are root only")
        XCTAssertEqual(deniedMessage { () throws(PropBusError) in try asRoot.checkRead("a.pin", writers: nil, secret: true, caller: alice) },
                       "uid 1000 may not read a.pin: it is secret, readable by its writers only, and writers are root and group propbus")
    }

    func testAllowedChecksDoNotThrow() {
        XCTAssertNoThrow(try policy.checkWrite("a.b", writers: nil, caller: member))
        XCTAssertNoThrow(try policy.checkRead("a.b", writers: nil, secret: false, caller: nobody))
        XCTAssertNoThrow(try policy.checkRead("a.b", writers: ["nobody"], secret: true, caller: nobody))
    }
}
