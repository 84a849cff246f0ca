import DBus
import PropBus

extension Service {
    /// `org.propbus.PropBus1.Command` on a command's object: its state as properties, the
    /// methods that run it, and a signal per execution event.
    func commandDescription(_ key: Key) -> InterfaceDescription {
        func state(_ name: String, _ type: DBusType, _ read: @escaping (CommandTable.State, CommandDefinition) -> DBusValue) -> PropertyDescription {
            PropertyDescription(name, type: type) { [unowned self] () throws(DBusError) in
                guard let current = commands.state(of: key), let definition = commands.definition(of: key) else {
                    throw .unknownObject("no command named \(key)")
                }
                return read(current, definition)
            }
        }
        return InterfaceDescription(Self.commandInterface, methods: [
            MethodDescription("Execute", in: [("input", .variant)], out: [("result", .variant)], access: .write(.fixed(key.text), kind: .command)) { [unowned self] call throws(DBusError) in
                _ = try startExecution(of: key, input: try call.variant("input"), call: call, waits: true)
                return .deferred
            },
            MethodDescription("Start", in: [("input", .variant)], out: [("id", .uint64)], access: .write(.fixed(key.text), kind: .command)) { [unowned self] call throws(DBusError) in
                let id = try startExecution(of: key, input: try call.variant("input"), call: call, waits: false)
                return .reply([.uint64(id)])
            },
            MethodDescription("Cancel", in: [("id", .uint64)], access: .write(.fixed(key.text), kind: .command)) { [unowned self] call throws(DBusError) in
                let id = try call.uint64("id")
                guard commands.execution(id, of: key) != nil else {
                    throw .invalidArgs("command \(key) has no running execution \(id)")
                }
                cancelExecution(id, of: key, reason: PropBusError(.cancelled, "execution \(id) of command \(key) was cancelled"))
                return .reply([])
            },
        ], properties: .fixed([
            state("Enabled", .boolean) { state, _ in .boolean(state.enabled) },
            state("Executing", .boolean) { state, _ in .boolean(state.executing) },
            state("Executions", .uint32) { state, _ in .uint32(state.executions) },
            state("AllowsConcurrentExecution", .boolean) { _, definition in .boolean(definition.concurrent) },
        ]), signals: [
            SignalDescription("Started", [("id", .uint64), ("input_size", .uint64)]),
            SignalDescription("Finished", [("id", .uint64), ("result", .variant)]),
            SignalDescription("Failed", [("id", .uint64), ("error_name", .string), ("message", .string)]),
        ])
    }

    /// CreateCommand, DeleteCommand, ListCommands, ListExecutions, RegisterHandler and UnregisterHandler of the
    /// Manager interface.
    func commandMethods() -> [MethodDescription] {
        [
            MethodDescription("CreateCommand", in: [("key", .string), ("options", .dictionary(key: .string, value: .variant))], writes: true,
                              // An argv runs as the daemon: only the default writers may set one,
                              // whatever a command's own `writers` allow.
                              access: .privileged(.argument("key"))) { [unowned self] call throws(DBusError) in
                let keyText = try call.string("key")
                let before = (try? Key(keyText)).flatMap { commands.definition(of: $0) }
                let commandOptions = try call.dictionary("options")
                publish(try bridged { () throws(PropBusError) in
                    try commands.create(key: keyText, options: commandOptions, creator: call.credentials?.userID)
                })
                if let before {
                    // Created again with other options: AllowsConcurrentExecution is no model key,
                    // so note it here (the flush drops it when it did not change).
                    tree.noteChange(path: Key.objectPath(ofGroup: before.key.text),
                                    interface: Self.commandInterface, property: "AllowsConcurrentExecution",
                                    oldValue: .boolean(before.concurrent))
                }
                return .reply([])
            },
            MethodDescription("DeleteCommand", in: [("key", .string)], writes: true, access: .privileged(.argument("key"))) { [unowned self] call throws(DBusError) in
                let keyText = try call.string("key")
                let key = try bridged { () throws(PropBusError) in try commands.command(keyText) }
                // Unexport while the command still exists, so InterfacesRemoved names both interfaces.
                tree.unexport(Key.objectPath(ofGroup: key.text))
                let (ended, changes) = try bridged { () throws(PropBusError) in try commands.delete(key: keyText) }
                publish(changes)
                for execution in ended {
                    cancelExecution(execution.id, of: key, reason: PropBusError(.cancelled, "command \(key) was deleted while execution \(execution.id) ran"))
                }
                return .reply([])
            },
            MethodDescription("ListCommands", out: [("commands", .array(.structure([.string, .dictionary(key: .string, value: .variant)])))]) { [unowned self] _ in
                let items = commands.definitions.map { definition in
                    var info = definition.options
                    let state = commands.state(of: definition.key)!
                    info["enabled"] = .boolean(state.enabled)
                    info["executing"] = .boolean(state.executing)
                    info["executions"] = .uint32(state.executions)
                    if definition.needsHandler { info["handler_owner"] = .string(commands.handler(of: definition.key) ?? "") }
                    if let creator = definition.creator { info["principal"] = .uint32(creator) }
                    return DBusValue.structure([.string(definition.key.text), .vardict(info)])
                }
                return .reply([.array(of: .structure([.string, .dictionary(key: .string, value: .variant)]), items)])
            },
            MethodDescription("ListExecutions", out: [("executions", .array(.structure([.uint64, .string, .string])))]) { [unowned self] _ in
                // What `propctl status` and `propctl cancel KEY` need: which executions run, of
                // what, for whom; in id order so the listing is stable.
                let items = running.sorted { $0.key < $1.key }.map { id, work in
                    DBusValue.structure([.uint64(id), .string(work.execution.command.text), .string(work.caller)])
                }
                return .reply([.array(of: .structure([.uint64, .string, .string]), items)])
            },
            MethodDescription("RegisterHandler", in: [("key", .string)], access: .write(.argument("key"), kind: .command)) { [unowned self] call throws(DBusError) in
                let keyText = try call.string("key")
                _ = try bridged { () throws(PropBusError) in try commands.command(keyText) }
                publish(try bridged { () throws(PropBusError) in try commands.registerHandler(keyText, owner: call.sender) })
                return .reply([])
            },
            MethodDescription("UnregisterHandler", in: [("key", .string)]) { [unowned self] call throws(DBusError) in
                let keyText = try call.string("key")
                let (ended, changes) = try bridged { () throws(PropBusError) in try commands.unregisterHandler(keyText, owner: call.sender) }
                publish(changes)
                for execution in ended {
                    finishExecution(execution.id, of: execution.command,
                                    .failure(PropBusError(.handlerVanished, "the handler of command \(execution.command) unregistered while execution \(execution.id) ran").dbusError))
                }
                return .reply([])
            },
        ]
    }
}
