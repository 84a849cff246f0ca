@testable import DBus
@testable import PropBus
@testable import PropBusService
import XCTest

/// `ListProperties` writes each property's metadata straight into the reply
/// (``Service/writeMetadata(of:gateRevision:lifetime:lockedForCaller:to:)``); it must say exactly what the dictionary built from
/// ``PropertyDefinition/metadata`` and the entry says (``expectedMetadata(of:etcdRevision:)``), entry
/// for entry and in the same order, whichever options a property has.
final class ListPropertiesMetadataTests: XCTestCase {
    /// The metadata dictionary of `ListProperties`, built the plain way.
    private static func expectedMetadata(of entry: PropertyModel.Entry, etcdRevision: Int64? = nil, lifetime: Lease? = nil) -> DBusValue {
        var items = entry.definition.metadata
        if let overrides = entry.layers?.overrides, !overrides.isEmpty {
            items["overrides"] = Service.overridesMetadata(overrides, secret: entry.definition.secret)
        }
        if let lifetime { items["lifetime"] = Service.lifetimeMetadata(lifetime) }
        if let layers = entry.layers {
            // Where the value comes from (docs/layers.md), and the user's own value a layer above hides.
            let layer = entry.valueLayer
            items["layer"] = .string(layer.rawValue)
            let source: String? = switch layer {
            case .mandatory: layers.mandatory?.value.source
            case .site: layers.site?.source
            case .vendor: layers.vendor?.source
            case .override: layers.overrides.last?.holder
            default: nil
            }
            if let source { items["layer_source"] = .string(source) }
            items["locked"] = .boolean(layers.mandatory != nil)
            if layer == .mandatory || layer == .override, let stored = entry.storedValue { items["user_value"] = stored }
        }
        if let etcdRevision { items["etcd_revision"] = .int64(etcdRevision) }
        items["is_set"] = .boolean(entry.storedValue != nil)
        items["revision"] = .uint64(entry.revision)
        if let hidden = entry.hidden {
            // Kept in the store, unseen: say so, and why, so nobody thinks it lost. An older
            // version's value may be too deep to send back: shown, it would fail the whole reply.
            if PropertyDefinition.canSendBack(hidden.value) { items["hidden_value"] = hidden.value }
            items["hidden_reason"] = .string(hidden.reason)
        }
        return .vardict(items)
    }

    private func makeMessage() throws -> Message {
        try Message.methodCall(destination: "org.propbus.Test", path: "/org/propbus/Test", interface: "org.propbus.Test", member: "Echo")
    }

    private func assertSame(_ entry: PropertyModel.Entry, etcdRevision: Int64? = nil, lifetime: Lease? = nil,
                            file: StaticString = #filePath, line: UInt = #line) throws {
        let built = try makeMessage()
        try built.append([Self.expectedMetadata(of: entry, etcdRevision: etcdRevision, lifetime: lifetime)])
        let streamed = try makeMessage()
        var writer = MessageBodyWriter.appending(to: streamed, limit: .max, arrayLimit: .max)
        Service.writeMetadata(of: entry, gateRevision: etcdRevision, lifetime: lifetime, to: &writer)
        XCTAssertNil(writer.failure, file: file, line: line)
        XCTAssertEqual(try streamed.arguments(), try built.arguments(), file: file, line: line)
        // The listing marshals into a buffer: the same bytes.
        var buffered = MessageBodyWriter.buffered(limit: .max, arrayLimit: .max)
        Service.writeMetadata(of: entry, gateRevision: etcdRevision, lifetime: lifetime, to: &buffered)
        XCTAssertNil(buffered.failure, file: file, line: line)
        let made = try makeMessage().replacingBody(with: try XCTUnwrap(buffered.buffer), signature: "a{sv}")
        XCTAssertEqual(try made.arguments(), try built.arguments(), file: file, line: line)
        XCTAssertEqual(made.marshalledBody(), built.marshalledBody(), file: file, line: line)
    }

    func testStreamedMetadataIsWhatTheDictionarySays() throws {
        let model = try PropertyModel(store: MemoryStore())
        _ = try model.create(key: "a.plain", type: "i", defaultValue: .int32(1))
        _ = try model.create(key: "a.full", type: "i", defaultValue: .int32(5), options: [
            "description": .string("every option"), "minimum": .int32(0), "maximum": .int32(9),
            "choices": .array(of: .variant, [.variant(.int32(5)), .variant(.int32(7))]),
            "writers": .array(of: .string, [.string("root"), .string("@wheel")]),
            "secret": .boolean(true), "persistent": .boolean(false), "writable": .boolean(false),
            "source": .string("/etc/propbus/models/a.json"),
        ])
        _ = try model.set("a.plain", to: .int32(3))
        model.commitRound()
        try assertSame(try model.entry("a.plain"))
        var full = try model.entry("a.full")
        try assertSame(full)
        // What only the daemon's own bookkeeping sets: a command's state key, a hidden value.
        full.definition.stateOf = try Key("a.command")
        full.hidden = PropertyModel.HiddenValue(value: .int32(80), reason: "80 is above the maximum 9")
        try assertSame(full)
        full.hidden = PropertyModel.HiddenValue(value: .string("old"), reason: "the type changed from 's' to 'i'")
        full.storedValue = .int32(7)
        try assertSame(full)
        // A fleet key: its scope, and the etcd revision the fleet knows.
        full.definition.scope = .fleet
        try assertSame(full)
        try assertSame(full, etcdRevision: 4242)
        // Overrides and an ephemeral key's lifetime, each naming its holder.
        full.layers = ValueLayers(overrides: [OverrideHold(handle: 3, value: .int32(1), holder: ":1.5", since: 10, expires: 20,
                                                           userID: 1000, processID: 77, command: "mpv"),
                                              OverrideHold(handle: 4, value: .int32(2), holder: ":1.6", since: 11)])
        try assertSame(full)
        // Layer files: a lock over the user's value, and a site default below it.
        full.layers = ValueLayers(mandatory: MandatoryValue(value: LayerValue(value: .int32(9), source: "/etc/propbus/mandatory.d/a.json")),
                                  site: LayerValue(value: .int32(8), source: "/etc/propbus/defaults.d/b.json"))
        try assertSame(full)
        full.layers = ValueLayers(site: LayerValue(value: .int32(8), source: "/etc/propbus/defaults.d/b.json"))
        full.storedValue = nil
        try assertSame(full)
        full.definition.secret = false
        try assertSame(full, lifetime: Lease(handle: 5, key: full.definition.key, subject: .key,
                                             holder: LeaseHolder(busName: ":1.5", processID: 77), since: 10, expires: nil))
    }
}
