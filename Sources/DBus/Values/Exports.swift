// The value model lives in DBusValues (no libdbus); re-exported so that `import DBus` keeps
// meaning the whole D-Bus library for its users.
@_exported import DBusValues

/// libdbus's C struct is also called `DBusError`; inside this module the name means ours (the C
/// one is spelled `CDBus.DBusError`), as it did when ours was declared here.
public typealias DBusError = DBusValues.DBusError
