import CDBus

/// Reads and writes ``DBusValue``s through libdbus's `DBusMessageIter`.
///
/// Reading is defensive: whatever arrives from the wire is checked against the signature libdbus
/// reports, and anything unexpected throws instead of trapping.
enum MessageIterator {
    // MARK: Reading

    /// Reads every remaining argument at `iter` (`dbus_message_iter_get_arg_type` loop).
    ///
    /// Every unix fd read is a duplicate libdbus made for the reader (`dbus_message_iter_get_basic`
    /// on `h`); each is appended to `fds`, whose owner must close it, also when reading throws.
    static func readAll(_ iter: inout DBusMessageIter, fds: inout [Int32]) throws(ValueError) -> [DBusValue] {
        var values: [DBusValue] = []
        while dbus_message_iter_get_arg_type(&iter) != 0 {
            values.append(try read(&iter, fds: &fds))
            dbus_message_iter_next(&iter)
        }
        return values
    }

    /// Reads the single value at `iter`, using the signature libdbus reports for it.
    static func read(_ iter: inout DBusMessageIter, fds: inout [Int32]) throws(ValueError) -> DBusValue {
        // Basic types and variants need no signature: skip the allocation and parse on the hot path.
        // A switch, not a dictionary: every argument of every call (a `Get`'s two names) is read here.
        if let basicType = DBusType(basicCode: TypeCode(rawValue: UInt8(truncatingIfNeeded: dbus_message_iter_get_arg_type(&iter)))) {
            return try read(&iter, as: basicType, fds: &fds)
        }
        guard let raw = dbus_message_iter_get_signature(&iter) else { throw ValueError("out of memory reading a signature") }
        defer { dbus_free(raw) }
        let text = String(cString: raw)
        let type: DBusType
        do { type = try DBusType(parsing: text) } catch { throw ValueError("bad signature from the wire: \(error)") }
        return try read(&iter, as: type, fds: &fds)
    }

    private static func basic<T>(_ iter: inout DBusMessageIter, _ zero: T) -> T {
        var value = zero
        withUnsafeMutablePointer(to: &value) { dbus_message_iter_get_basic(&iter, $0) }
        return value
    }

    private static func string(_ iter: inout DBusMessageIter) -> String {
        var pointer: UnsafePointer<CChar>? = nil
        withUnsafeMutablePointer(to: &pointer) { dbus_message_iter_get_basic(&iter, $0) }
        return pointer.map { String(cString: $0) } ?? ""
    }

    private static func read(_ iter: inout DBusMessageIter, as type: DBusType, fds: inout [Int32]) throws(ValueError) -> DBusValue {
        let code = dbus_message_iter_get_arg_type(&iter)
        func expect(_ expected: TypeCode) throws(ValueError) {
            guard code == expected.cValue else {
                throw ValueError("expected '\(expected.character)' on the wire, found code \(code)")
            }
        }
        switch type {
        case .byte: try expect(.byte); return .byte(basic(&iter, UInt8(0)))
        case .boolean: try expect(.boolean); return .boolean(basic(&iter, UInt32(0)) != 0)
        case .int16: try expect(.int16); return .int16(basic(&iter, Int16(0)))
        case .uint16: try expect(.uint16); return .uint16(basic(&iter, UInt16(0)))
        case .int32: try expect(.int32); return .int32(basic(&iter, Int32(0)))
        case .uint32: try expect(.uint32); return .uint32(basic(&iter, UInt32(0)))
        case .int64: try expect(.int64); return .int64(basic(&iter, Int64(0)))
        case .uint64: try expect(.uint64); return .uint64(basic(&iter, UInt64(0)))
        case .double: try expect(.double); return .double(basic(&iter, Double(0)))
        case .unixFD:
            try expect(.unixFD)
            let fd = basic(&iter, Int32(-1))
            if fd >= 0 { fds.append(fd) }
            return .unixFD(fd)
        case .string: try expect(.string); return .string(string(&iter))
        case .objectPath: try expect(.objectPath); return .objectPath(string(&iter))
        case .signature: try expect(.signature); return .signature(string(&iter))
        case .variant:
            try expect(.variant)
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            return .variant(try read(&sub, fds: &fds))
        case .array(let element):
            try expect(.array)
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            if element == .byte {
                var pointer: UnsafePointer<UInt8>? = nil
                var count: Int32 = 0
                withUnsafeMutablePointer(to: &pointer) { dbus_message_iter_get_fixed_array(&sub, $0, &count) }
                guard let pointer, count > 0 else { return .bytes([]) }
                return .bytes(Array(UnsafeBufferPointer(start: pointer, count: Int(count))))
            }
            var items: [DBusValue] = []
            while dbus_message_iter_get_arg_type(&sub) != 0 {
                items.append(try read(&sub, as: element, fds: &fds))
                dbus_message_iter_next(&sub)
            }
            return .array(element: element, items)
        case .dictionary(let keyType, let valueType):
            try expect(.array)
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            var entries: [DictionaryEntry] = []
            while dbus_message_iter_get_arg_type(&sub) != 0 {
                guard dbus_message_iter_get_arg_type(&sub) == TypeCode.dictEntryValue.cValue else {
                    throw ValueError("expected a dict entry on the wire")
                }
                var entry = DBusMessageIter()
                dbus_message_iter_recurse(&sub, &entry)
                let key = try read(&entry, as: keyType, fds: &fds)
                guard dbus_message_iter_next(&entry) != 0 else { throw ValueError("dict entry without a value") }
                let value = try read(&entry, as: valueType, fds: &fds)
                entries.append(DictionaryEntry(key, value))
                dbus_message_iter_next(&sub)
            }
            return .dictionary(key: keyType, value: valueType, entries)
        case .structure(let fieldTypes):
            try expect(.structValue)
            var sub = DBusMessageIter()
            dbus_message_iter_recurse(&iter, &sub)
            var fields: [DBusValue] = []
            for (index, fieldType) in fieldTypes.enumerated() {
                if index > 0 { guard dbus_message_iter_next(&sub) != 0 else { throw ValueError("struct ended early") } }
                fields.append(try read(&sub, as: fieldType, fds: &fds))
            }
            return .structure(fields)
        }
    }

    // MARK: Writing

    /// Appends `value` at `iter` (`dbus_message_iter_append_basic` / `open_container`).
    ///
    /// The value must have passed ``DBusValue/validate()``; the only failure left is running
    /// out of memory.
    static func append(_ value: DBusValue, to iter: inout DBusMessageIter) throws(ValueError) {
        func basic<T>(_ code: TypeCode, _ v: T) throws(ValueError) {
            var copy = v
            let ok = withUnsafePointer(to: &copy) { dbus_message_iter_append_basic(&iter, code.cValue, $0) }
            guard ok != 0 else { throw ValueError("out of memory appending '\(code.character)'") }
        }
        func text(_ code: TypeCode, _ s: String) throws(ValueError) {
            let ok = s.withCString { cString in
                var pointer: UnsafePointer<CChar>? = cString
                return withUnsafePointer(to: &pointer) { dbus_message_iter_append_basic(&iter, code.cValue, $0) }
            }
            guard ok != 0 else { throw ValueError("libdbus refused a '\(code.character)' value") }
        }
        func container(_ code: TypeCode, _ signature: String?, _ body: (inout DBusMessageIter) throws(ValueError) -> Void) throws(ValueError) {
            var sub = DBusMessageIter()
            let opened: UInt32
            if let signature {
                opened = signature.withCString { dbus_message_iter_open_container(&iter, code.cValue, $0, &sub) }
            } else {
                opened = dbus_message_iter_open_container(&iter, code.cValue, nil, &sub)
            }
            guard opened != 0 else { throw ValueError("out of memory opening a container") }
            do throws(ValueError) {
                try body(&sub)
            } catch {
                dbus_message_iter_abandon_container(&iter, &sub)
                throw error
            }
            guard dbus_message_iter_close_container(&iter, &sub) != 0 else { throw ValueError("out of memory closing a container") }
        }

        switch value {
        case .byte(let v): try basic(.byte, v)
        case .boolean(let v): try basic(.boolean, UInt32(v ? 1 : 0))
        case .int16(let v): try basic(.int16, v)
        case .uint16(let v): try basic(.uint16, v)
        case .int32(let v): try basic(.int32, v)
        case .uint32(let v): try basic(.uint32, v)
        case .int64(let v): try basic(.int64, v)
        case .uint64(let v): try basic(.uint64, v)
        case .double(let v): try basic(.double, v)
        case .unixFD(let v): try basic(.unixFD, v)
        case .string(let s): try text(.string, s)
        case .objectPath(let s): try text(.objectPath, s)
        case .signature(let s): try text(.signature, s)
        case .variant(let inner):
            try container(.variant, inner.signature) { (sub: inout DBusMessageIter) throws(ValueError) in try append(inner, to: &sub) }
        case .bytes(let bytes):
            try container(.array, "y") { (sub: inout DBusMessageIter) throws(ValueError) in
                let ok = bytes.withUnsafeBufferPointer { buffer in
                    var pointer = buffer.baseAddress
                    return withUnsafePointer(to: &pointer) {
                        dbus_message_iter_append_fixed_array(&sub, TypeCode.byte.cValue, $0, Int32(buffer.count))
                    }
                }
                guard ok != 0 else { throw ValueError("out of memory appending bytes") }
            }
        case .array(let element, let items):
            try container(.array, element.signature) { (sub: inout DBusMessageIter) throws(ValueError) in
                for item in items { try append(item, to: &sub) }
            }
        case .dictionary(let key, let valueType, let entries):
            try container(.array, "{" + key.signature + valueType.signature + "}") { (sub: inout DBusMessageIter) throws(ValueError) in
                for entry in entries {
                    var entryIter = DBusMessageIter()
                    guard dbus_message_iter_open_container(&sub, TypeCode.dictEntryValue.cValue, nil, &entryIter) != 0 else {
                        throw ValueError("out of memory opening a dict entry")
                    }
                    do throws(ValueError) {
                        try append(entry.key, to: &entryIter)
                        try append(entry.value, to: &entryIter)
                    } catch {
                        dbus_message_iter_abandon_container(&sub, &entryIter)
                        throw error
                    }
                    guard dbus_message_iter_close_container(&sub, &entryIter) != 0 else { throw ValueError("out of memory closing a dict entry") }
                }
            }
        case .structure(let fields):
            try container(.structValue, nil) { (sub: inout DBusMessageIter) throws(ValueError) in
                for field in fields { try append(field, to: &sub) }
            }
        }
    }
}
