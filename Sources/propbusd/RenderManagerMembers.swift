import DBus
import Dispatch
import PropBus
import PropBusRender
import PropBusService
import SystemKit

/// The Manager's render methods (docs/dbus-api.md, "Renders"): `ListRenders`, `GetRender`,
/// `PreviewRender` and `RunRender`, over the daemon's ``RenderRunner``.
///
/// Anyone may list, describe and preview (a secret's value shows as `<secret>` to whoever may
/// not read the key, and a template only root may read is previewed by root only); running one needs
/// the default writers' rights, as reloading the model files does. The daemon's queue's.
final class RenderManagerMembers: ManagerExtension {
    let access: AccessPolicy
    /// Where a deferred reply is sent from.
    private let connection: Connection
    /// `nil` until the renders' lifecycle step ran.
    var runner: RenderRunner?
    /// Whether a caller may read a key's value (a secret's writers may), from the model.
    var mayRead: ((String, Credentials?) -> Bool)?

    init(access: AccessPolicy, connection: Connection) {
        self.access = access
        self.connection = connection
    }

    private static let summaryType = DBusType.dictionary(key: .string, value: .variant)

    private func running() throws(DBusError) -> RenderRunner {
        guard let runner else { throw PropBusError(.unavailable, "propbusd has not started its renders yet").dbusError }
        return runner
    }

    func managerMethods() -> [MethodDescription] {
        [
            MethodDescription("ListRenders", out: [("renders", .array(.structure([.string, Self.summaryType])))]) { [unowned self] _ throws(DBusError) in
                .reply([.array(of: .structure([.string, Self.summaryType]), try running().summaries.map { summary in
                    .structure([.string(summary.declaration.name), Self.fields(of: summary)])
                })])
            },
            MethodDescription("GetRender", in: [("name", .string)], out: [("render", Self.summaryType)]) { [unowned self] call throws(DBusError) in
                let runner = try running(), name = try call.string("name")
                let summary = try bridged { () throws(PropBusError) in try runner.summary(of: name) }
                return .reply([Self.fields(of: summary)])
            },
            MethodDescription("PreviewRender", in: [("name", .string)],
                              out: [("state", .string), ("message", .string), ("content", .array(.byte)), ("masked", .boolean)]) { [unowned self] call throws(DBusError) in
                let name = try call.string("name")
                let runner = try running()
                let summary = try bridged { () throws(PropBusError) in try runner.summary(of: name) }
                // Without access checks (a session bus) the caller is the daemon's own user.
                let privileged = !access.isEnabled || access.isPrivileged(call.credentials)
                if summary.declaration.templateIsPrivate, !privileged {
                    throw PropBusError(.accessDenied, "\(AccessPolicy.describe(call.credentials)) may not preview render \(name): its template \(summary.declaration.templatePath ?? "") is readable by root only").dbusError
                }
                let mayRead = mayRead, caller = call.credentials
                let hiding: ((String) -> Bool)? = privileged ? nil : { key in !(mayRead?(key, caller) ?? false) }
                let preview = try bridged { () throws(PropBusError) in try runner.preview(name, hiding: hiding) }
                return .reply([.string(preview.state.rawValue), .string(preview.message), .bytes(preview.bytes), .boolean(preview.masked)])
            },
            MethodDescription("RunRender", in: [("name", .string)], out: [("state", .string), ("message", .string), ("revision", .uint64)],
                              access: .privileged(.argument("name", prefix: "render "))) { [unowned self] call throws(DBusError) in
                let connection = connection, runner = try running(), name = try call.string("name")
                try bridged { () throws(PropBusError) in
                    try runner.run(name) { status in
                        call.reply([.string(status.state.rawValue), .string(status.message), .uint64(status.revision)])
                        connection.scheduleRound()
                    }
                }
                return .deferred
            },
        ]
    }

    func managerProperties() -> [PropertyDescription] { [] }

    /// A render as `a{sv}`: its state and its declaration, never a value of a key.
    static func fields(of summary: RenderSummary) -> DBusValue {
        let declaration = summary.declaration
        var fields: [(String, DBusValue)] = [
            ("state", .string(summary.status.state.rawValue)),
            ("message", .string(summary.status.message)),
            ("revision", .uint64(summary.status.revision)),
            ("running", .boolean(summary.running)),
            ("destination", .string(declaration.destination)),
            ("owner", .string(declaration.owner?.description ?? "")),
            ("group", .string(declaration.group?.description ?? "")),
            ("mode", .string("0" + String(declaration.mode, radix: 8))),
            ("template", .string(declaration.templatePath ?? "")),
            ("check", .array(of: .string, declaration.check.map { .string($0) })),
            ("reload", .array(of: .string, declaration.reload.map { .string($0) })),
            ("wait_min", .double(Double(declaration.wait.minimum) / 1e9)),
            ("wait_max", .double(Double(declaration.wait.maximum) / 1e9)),
            ("require", .array(of: .string, declaration.requirements.map { .string($0.description) })),
            ("escape", .string(declaration.escaping.rawValue)),
            ("timeout", .double(declaration.timeout)),
            ("reads", .array(of: .string, declaration.keys.sorted().map { .string($0) })),
            ("walks", .array(of: .string, declaration.groups.sorted().map { .string($0 + ".*") })),
            ("source", .string(declaration.source)),
        ]
        if let description = declaration.description { fields.append(("description", .string(description))) }
        if let lastRun = summary.lastRun { fields.append(("last_run", .uint64(lastRun))) }
        return .dictionary(key: .string, value: .variant, fields.map { DictionaryEntry(.string($0.0), .variant($0.1)) })
    }
}
