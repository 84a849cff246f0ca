"""Errors as exception classes named after the D-Bus errors the daemon and the bus answer."""

from __future__ import annotations

from typing import Dict, Optional, Type

PROPBUS_ERROR = "org.propbus.PropBus1.Error."
DBUS_ERROR = "org.freedesktop.DBus.Error."


class PropBusError(Exception):
    """An error answered by propbusd or the bus.

    ``name`` is the D-Bus error name (``org.propbus.PropBus1.Error.Conflict``), ``message`` the
    daemon's text, which names the key and what was expected. Every daemon and standard error
    has a subclass of its own, so ``except propbus.Conflict:`` works; a name without one is a
    plain ``PropBusError``.
    """

    #: The D-Bus error name this class stands for (``None`` for the base class).
    dbus_name: Optional[str] = None

    def __init__(self, name: str, message: str = "") -> None:
        super().__init__(f"{name}: {message}" if message else name)
        self.name = name
        self.message = message


def _define(short: str, prefix: str, doc: str) -> Type[PropBusError]:
    cls = type(short, (PropBusError,), {"__doc__": doc, "dbus_name": prefix + short, "__module__": "propbus"})
    return cls


# The daemon's own errors (org.propbus.PropBus1.Error.*).
InvalidKey = _define("InvalidKey", PROPBUS_ERROR, "A key that breaks the group.name rule.")
UnknownKey = _define("UnknownKey", PROPBUS_ERROR, "A key (or override handle) that does not exist.")
TypeMismatch = _define("TypeMismatch", PROPBUS_ERROR, "A value or definition of another D-Bus type than the key's.")
ReadOnly = _define("ReadOnly", PROPBUS_ERROR, "A write through the daemon's methods to a read-only key.")
OutOfRange = _define("OutOfRange", PROPBUS_ERROR, "A number outside the key's minimum..maximum.")
InvalidValue = _define("InvalidValue", PROPBUS_ERROR, "A value not among the key's choices.")
Conflict = _define("Conflict", PROPBUS_ERROR, "A compare-and-set whose revision moved, or a revert of a key changed since.")
TransformFailed = _define("TransformFailed", PROPBUS_ERROR, "A binding's transform failed.")
InvalidExpression = _define("InvalidExpression", PROPBUS_ERROR, "An expression that does not parse.")
NotEnabled = _define("NotEnabled", PROPBUS_ERROR, "A command executed while it is not enabled; the message says why.")
ExecutionFailed = _define("ExecutionFailed", PROPBUS_ERROR, "A command's program exited non-zero or could not start.")
InvalidOutput = _define("InvalidOutput", PROPBUS_ERROR, "A command printed something that is not UTF-8 text.")
TimedOut = _define("TimedOut", PROPBUS_ERROR, "An execution stopped by its command's timeout.")
Cancelled = _define("Cancelled", PROPBUS_ERROR, "An execution that was cancelled.")
HandlerVanished = _define("HandlerVanished", PROPBUS_ERROR, "An execution whose handler left the bus.")
LimitsExceeded = _define("LimitsExceeded", PROPBUS_ERROR, "A limit or quota; the message names it.")
Exists = _define("Exists", PROPBUS_ERROR, "Something that exists already (e.g. a second handler).")
StoreFailed = _define("StoreFailed", PROPBUS_ERROR, "The daemon's store could not commit.")
Locked = _define("Locked", PROPBUS_ERROR, "A write of a key a mandatory layer file locks; names the file.")
Unavailable = _define("Unavailable", PROPBUS_ERROR, "A fleet key's write while etcd cannot be reached.")

# Standard errors (org.freedesktop.DBus.Error.*).
AccessDenied = _define("AccessDenied", DBUS_ERROR, "The caller may not do this; names the key and its writers.")
InvalidArgs = _define("InvalidArgs", DBUS_ERROR, "Arguments of the wrong type or shape (e.g. a Set of another type).")
PropertyReadOnly = _define("PropertyReadOnly", DBUS_ERROR, "Properties.Set of a read-only key.")
UnknownProperty = _define("UnknownProperty", DBUS_ERROR, "A property the object does not have.")
UnknownObject = _define("UnknownObject", DBUS_ERROR, "An object path the daemon does not export.")
UnknownInterface = _define("UnknownInterface", DBUS_ERROR, "An interface the object does not have.")
UnknownMethod = _define("UnknownMethod", DBUS_ERROR, "A method the interface does not have.")
ServiceUnknown = _define("ServiceUnknown", DBUS_ERROR, "propbusd is not on the bus.")
NoReply = _define("NoReply", DBUS_ERROR, "No reply came in time.")
Disconnected = _define("Disconnected", DBUS_ERROR, "The connection to the bus is gone.")

_BY_NAME: Dict[str, Type[PropBusError]] = {
    cls.dbus_name: cls
    for cls in list(globals().values())
    if isinstance(cls, type) and issubclass(cls, PropBusError) and cls.dbus_name
}


def error_from(name: str, message: str = "") -> PropBusError:
    """The exception for a D-Bus error ``name`` (its class, or ``PropBusError``)."""
    return _BY_NAME.get(name, PropBusError)(name, message)


def error_class(name: str) -> Type[PropBusError]:
    """The exception class of a D-Bus error name (``PropBusError`` for a name without one)."""
    return _BY_NAME.get(name, PropBusError)


ALL_ERRORS = sorted(cls.__name__ for cls in _BY_NAME.values())
