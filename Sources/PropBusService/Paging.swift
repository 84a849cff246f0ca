import DBus
import PropBus

/// One page of a listing that may not fit in one message (`ListBindingsPage`,
/// `ListUnclaimedPage`): at most `limit` rows (0: no limit), ending before the reply would pass
/// the message limit, so that a client can always ask for less and go on where it stopped.
struct Page<Item> {
    /// The rows of this page.
    var rows: [DBusValue] = []
    /// The last item on the page, when more come after it (the next page's cursor).
    var last: Item?

    /// Room kept for the reply's header and its cursor argument.
    static var headroom: Int { 8192 }

    /// Takes rows from `items`, in order; `row` builds each one. The first row is always taken,
    /// so a page is never empty while rows remain (a row too big alone fails as the whole
    /// listing did: `LimitsExceeded`, naming the limit).
    init<Items: Sequence>(_ items: Items, limit: UInt32, maximumMessageSize: Int, row: (Item) -> DBusValue) where Items.Element == Item {
        let budget = maximumMessageSize - Self.headroom
        let count = limit == 0 ? Int.max : Int(limit)
        var size = 0
        var previous: Item?
        for item in items {
            if rows.count == count {
                last = previous
                return
            }
            let value = row(item)
            // A struct starts on 8 bytes: count the padding a row may need.
            let rowSize = value.wireSize() + 7
            if !rows.isEmpty, size + rowSize > budget {
                last = previous
                return
            }
            size += rowSize
            rows.append(value)
            previous = item
        }
    }

    /// The reply: the page's rows, each of type `rowType`, then `cursor` (the next page's).
    /// Marshalled into a buffer that libdbus checks once: appended through libdbus field by
    /// field, a page of history rows (`a{sv}` of about 16 variants each) spent more than half of
    /// its call there.
    func reply(rowType: DBusType, cursor: DBusValue) -> MethodResult {
        let rows = rows, element = rowType.signature
        return .stream(ReplyBody(signature: "a" + element + cursor.signature) { writer in
            writer.array(of: element, alignment: DBusValue.alignment(of: rowType)) { items in
                for row in rows { items.value(row) }
            }
            writer.value(cursor)
        })
    }
}
