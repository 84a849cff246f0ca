#!/usr/bin/python3
"""The python-dbus reference for bench/all.sh: a property service as one would write it in Python.

    ref-service.py ADDRESS BUS_NAME STORE

Loads every stored value of STORE (a propbusd SQLite store holding int32 values GROUP.NAME, as
bench/all.sh generates it), exports one object per group below /org/propbus/PropBus1 with the
values as properties of org.propbus.PropBus1.Values (Properties.Get, GetAll and Set), and the
root as an ObjectManager, as propbusd does; then owns BUS_NAME and runs a GLib main loop.
"""
import sqlite3
import struct
import sys

import dbus
import dbus.service
from dbus.mainloop.glib import DBusGMainLoop
from gi.repository import GLib

ROOT = "/org/propbus/PropBus1"
VALUES = "org.propbus.PropBus1.Values"
PROPERTIES = dbus.PROPERTIES_IFACE
OBJECT_MANAGER = "org.freedesktop.DBus.ObjectManager"


class Group(dbus.service.Object):
    def __init__(self, bus, path, values):
        super().__init__(bus, path)
        self.values = values

    def _check(self, interface, name=None):
        if interface != VALUES or (name is not None and name not in self.values):
            raise dbus.exceptions.DBusException(
                f"no property {interface}.{name}", name="org.freedesktop.DBus.Error.UnknownProperty")

    @dbus.service.method(PROPERTIES, in_signature="ss", out_signature="v")
    def Get(self, interface, name):
        self._check(interface, name)
        return dbus.Int32(self.values[name])

    @dbus.service.method(PROPERTIES, in_signature="s", out_signature="a{sv}")
    def GetAll(self, interface):
        self._check(interface)
        return {name: dbus.Int32(value) for name, value in self.values.items()}

    @dbus.service.method(PROPERTIES, in_signature="ssv")
    def Set(self, interface, name, value):
        self._check(interface, name)
        self.values[name] = int(value)
        self.PropertiesChanged(VALUES, {name: dbus.Int32(value)}, [])

    @dbus.service.signal(PROPERTIES, signature="sa{sv}as")
    def PropertiesChanged(self, interface, changed, invalidated):
        pass


class Root(dbus.service.Object):
    def __init__(self, bus, groups):
        super().__init__(bus, ROOT)
        self.groups = groups

    @dbus.service.method(OBJECT_MANAGER, out_signature="a{oa{sa{sv}}}")
    def GetManagedObjects(self):
        return {group.__dbus_object_path__: {VALUES: {n: dbus.Int32(v) for n, v in group.values.items()}}
                for group in self.groups}


def load(store):
    groups = {}
    with sqlite3.connect(f"file:{store}?mode=ro", uri=True) as db:
        for key, blob in db.execute("SELECT key, value FROM stored_values"):
            group, _, name = key.rpartition(".")
            if len(blob) != 7 or blob[:3] != b"\x01\x01i":
                sys.exit(f"ref-service.py: {store}: {key} is not an int32 value")
            groups.setdefault(group, {})[name] = struct.unpack("<i", blob[3:])[0]
    return groups


def main():
    if len(sys.argv) != 4:
        sys.exit("usage: ref-service.py ADDRESS BUS_NAME STORE")
    address, name, store = sys.argv[1:]
    DBusGMainLoop(set_as_default=True)
    bus = dbus.bus.BusConnection(address)
    groups = [Group(bus, ROOT + "/" + group.replace(".", "/"), values) for group, values in load(store).items()]
    Root(bus, groups)
    owned = dbus.service.BusName(name, bus, do_not_queue=True)
    GLib.MainLoop().run()
    del owned


if __name__ == "__main__":
    main()
