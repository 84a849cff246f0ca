/// Python programs (python3-gi) that use GSettings as applications do, for the GSettings
/// backend tests. Each prints what the test checks.
enum GSettingsScripts {
    /// Shared helpers: a main-loop wait, and `check` that records failures and goes on.
    static let prelude = #"""
    import sys, time
    from gi.repository import Gio, GLib, GObject
    ID = "org.propbus.gstest"
    failures = []
    def check(condition, what):
        if not condition:
            failures.append(what)
            print("FAIL", what, flush=True)
    def settle(condition=lambda: False, timeout=20.0):
        deadline = time.monotonic() + timeout
        context = GLib.MainContext.default()
        while time.monotonic() < deadline:
            while context.pending():
                context.iteration(False)
            if condition():
                return True
            context.iteration(False)
            time.sleep(0.002)
        return condition()
    def finish():
        print("FAILURES", len(failures), flush=True)
        sys.exit(1 if failures else 0)
    """#

    /// GLib's own expectations of a backend (its gsettings tests' cases that apply to a
    /// backend: basic and complex types, changes, delay-apply, revert, reset in delay mode,
    /// atomic change-event, user and default values, bindings, writability bindings, enums,
    /// flags, ranges, children), run against propbus in one process.
    static let glibCases = prelude + "\n" + #"""
    class Model(GObject.Object):
        flag = GObject.Property(type=bool, default=False)
        number = GObject.Property(type=int, default=0)

    def basic_types():
        s = Gio.Settings.new(ID)
        for key, variant in [("enabled", GLib.Variant("b", False)), ("tiny", GLib.Variant("y", 255)),
                             ("small", GLib.Variant("n", -32768)), ("word", GLib.Variant("q", 65535)),
                             ("count", GLib.Variant("i", 100)), ("unsigned", GLib.Variant("u", 4294967295)),
                             ("big", GLib.Variant("x", -9223372036854775808)), ("huge", GLib.Variant("t", 18446744073709551615)),
                             ("ratio", GLib.Variant("d", -1e300)), ("font-name", GLib.Variant("s", "Sans \u00e9\u2603 10")),
                             ("object", GLib.Variant("o", "/org/propbus/x"))]:
            check(s.set_value(key, variant), "basic: set " + key)
            check(s.get_value(key) == variant, "basic: read back " + key + ": " + str(s.get_value(key)))
        Gio.Settings.sync()

    def complex_types():
        s = Gio.Settings.new(ID)
        for key, variant in [("nested", GLib.Variant("(s(ii))", ("two", (1, 2)))),
                             ("tags", GLib.Variant("as", ["x", "y", ""])),
                             ("table", GLib.Variant("a{sau}", {"AC": [1, 2], "IV": []})),
                             ("options", GLib.Variant("a{sv}", {"n": GLib.Variant("i", 5), "m": GLib.Variant("ms", "in a variant"), "v": GLib.Variant("v", GLib.Variant("s", "deep"))})),
                             ("maybe-name", GLib.Variant("ms", "just this")), ("maybe-list", GLib.Variant("mai", [1, 2]))]:
            check(s.set_value(key, variant), "complex: set " + key)
            check(s.get_value(key) == variant, "complex: read back " + key + ": " + str(s.get_value(key)))
        check(s.set_value("maybe-name", GLib.Variant("ms", None)), "complex: set nothing")
        check(s.get_value("maybe-name").get_maybe() is None, "complex: nothing reads as nothing")
        check(s.set_value("maybe-name", GLib.Variant("ms", "just this")), "complex: set just again")
        Gio.Settings.sync()

    def changes():
        s, s2 = Gio.Settings.new(ID), Gio.Settings.new(ID)
        seen = []
        s.connect("changed", lambda settings, key: seen.append(key))
        s2.set_string("greeting", "hi there")
        check(seen == ["greeting"], "changes: a write through another GSettings is announced at once: " + str(seen))
        check(s.get_string("greeting") == "hi there", "changes: and read")
        seen.clear()
        s2.set_string("greeting", "hi there")
        check(seen == [], "changes: writing the same value announces nothing: " + str(seen))

    def delay_apply():
        s, s2 = Gio.Settings.new(ID), Gio.Settings.new(ID)
        s2.set_string("greeting", "top o' the morning")
        called, called2 = [], []
        s.connect("changed", lambda *a: called.append(a[1]))
        s2.connect("changed", lambda *a: called2.append(a[1]))
        s.delay()
        s.set_string("greeting", "greetings from delay_apply")
        check(called and not called2, "delay_apply: a delayed write is announced to its own GSettings only")
        called.clear(); s.reset("greeting")
        check(called and not called2, "delay_apply: a delayed reset too")
        s.set_string("greeting", "greetings from delay_apply")
        check(s.is_writable("greeting"), "delay_apply: writable")
        check(s.get_user_value("greeting").get_string() == "greetings from delay_apply", "delay_apply: user value while delayed")
        check(s2.get_string("greeting") == "top o' the morning", "delay_apply: others read the old value")
        check(s.get_has_unapplied() and not s2.get_has_unapplied(), "delay_apply: has-unapplied")
        called.clear(); called2.clear()
        s.apply()
        check(not called and called2, "delay_apply: apply announces to the others only: %s %s" % (called, called2))
        check(s2.get_string("greeting") == "greetings from delay_apply", "delay_apply: others read the applied value")
        s.reset("greeting"); s.apply()
        check(s.get_string("greeting") == "Hello, earthlings", "delay_apply: an applied reset reads the schema default")
        Gio.Settings.sync()

    def delay_revert():
        s, s2 = Gio.Settings.new(ID), Gio.Settings.new(ID)
        s2.set_string("greeting", "top o' the morning")
        s.delay()
        s.set_string("greeting", "greetings from delay_revert")
        check(s.get_string("greeting") == "greetings from delay_revert", "delay_revert: own view")
        s.revert()
        check(not s.get_has_unapplied(), "delay_revert: nothing unapplied")
        check(s.get_string("greeting") == "top o' the morning" and s2.get_string("greeting") == "top o' the morning", "delay_revert: value kept")

    def delay_reset_key():
        delayed, direct = Gio.Settings.new(ID), Gio.Settings.new(ID)
        direct.set_string("greeting", "ey up")
        delayed.delay()
        delayed.set_string("greeting", "how do")
        delayed.reset("greeting")
        check(delayed.get_has_unapplied(), "delay_reset_key: the reset is unapplied")
        check(delayed.get_string("greeting") == "Hello, earthlings" and direct.get_string("greeting") == "ey up", "delay_reset_key: views")
        delayed.apply()
        check(direct.get_string("greeting") == "Hello, earthlings", "delay_reset_key: applied")
        Gio.Settings.sync()

    def atomic():
        s, s2 = Gio.Settings.new(ID), Gio.Settings.new(ID)
        events = []
        def on_event(settings, keys, n):
            events.append((sorted(GLib.quark_to_string(k) for k in keys),
                           settings.get_string("greeting"), settings.get_string("farewell")))
            return False
        s2.connect("change-event", on_event)
        s.delay()
        s.set_string("greeting", "greetings from atomic")
        s.set_string("farewell", "atomic bye-bye")
        s.apply()
        check(events == [(["farewell", "greeting"], "greetings from atomic", "atomic bye-bye")], "atomic: one change-event with both keys: " + str(events))
        Gio.Settings.sync()

    def default_value():
        s = Gio.Settings.new(ID)
        s.set_string("greeting", "goodbye world")
        check(s.get_user_value("greeting").get_string() == "goodbye world", "default_value: user value")
        check(s.get_default_value("greeting").get_string() == "Hello, earthlings", "default_value: default value")
        s.reset("greeting")
        check(s.get_user_value("greeting") is None, "default_value: no user value after a reset")
        check(s.get_string("greeting") == "Hello, earthlings", "default_value: reads the default")
        Gio.Settings.sync()
        check(s.get_user_value("greeting") is None, "default_value: still none once the daemon answered")

    def bindings():
        s, model = Gio.Settings.new(ID), Model()
        s.set_boolean("enabled", False)
        s.bind("enabled", model, "flag", Gio.SettingsBindFlags.DEFAULT)
        check(model.flag is False, "bindings: the initial value reaches the object")
        writes = []
        s.connect("changed::enabled", lambda *a: writes.append(1))
        model.flag = True
        check(s.get_boolean("enabled") is True and len(writes) == 1, "bindings: one write per object change: %d" % len(writes))
        s.set_boolean("enabled", False)
        check(model.flag is False, "bindings: a settings change reaches the object")
        Gio.Settings.sync()
        settle(timeout=0.5)
        check(len(writes) == 2, "bindings: nothing echoed back once the daemon answered: %d" % len(writes))
        s.unbind(model, "flag")
        other = Model(); other.flag = True
        s.set_boolean("enabled", False)
        s.bind("enabled", other, "flag", Gio.SettingsBindFlags.GET_NO_CHANGES)
        check(other.flag is False, "no_change_binding: initial value")
        s.set_boolean("enabled", True)
        check(other.flag is False, "no_change_binding: later changes do not reach the object")
        s.unbind(other, "flag")
        writable = Model()
        s.bind_writable("count", writable, "flag", False)
        check(writable.flag is True, "bind_writable: writable")
        s.unbind(writable, "flag")
        s.bind_writable("count", writable, "flag", True)
        check(writable.flag is False, "bind_writable: inverted")
        Gio.Settings.sync()

    def enums_flags_ranges():
        s = Gio.Settings.new(ID)
        check(s.set_enum("colour", 2) and s.get_string("colour") == "blue" and s.get_enum("colour") == 2, "enums")
        check(s.set_flags("sides", 5) and s.get_flags("sides") == 5 and sorted(s.get_strv("sides")) == ["left", "top"], "flags")
        check(s.range_check("count", GLib.Variant("i", 101)) is False, "range: GSettings refuses 101 itself")
        Gio.Settings.sync()

    def child():
        base = Gio.Settings.new(ID + ".child")
        base.set_int("depth", 36)
        s = Gio.Settings.new(ID)
        s.delay()
        c = s.get_child("child")
        check(c.get_int("depth") == 36, "child: reads")
        c.set_int("depth", 42)
        check(base.get_int("depth") == 36, "child: delayed with its parent")
        c.apply()
        check(base.get_int("depth") == 42, "child: applied")
        Gio.Settings.sync()

    for case in [basic_types, complex_types, changes, delay_apply, delay_revert, delay_reset_key, atomic,
                 default_value, bindings, enums_flags_ranges, child]:
        try:
            case()
            print("ran", case.__name__, flush=True)
        except Exception as error:
            check(False, "%s raised %r" % (case.__name__, error))
    finish()
    """#

    /// Follows a GSettings path: prints `changed KEY VALUE`, `writable KEY BOOL` and
    /// `event KEY,KEY…` (a change-event's keys) for every notification, after `ready`; runs
    /// until killed. Arguments: schema id, path (or "").
    static let follower = prelude + "\n" + #"""
    schema, path = sys.argv[1], sys.argv[2]
    s = Gio.Settings.new_with_path(schema, path) if path else Gio.Settings.new(schema)
    s.connect("changed", lambda settings, key: print("changed", key, settings.get_value(key).print_(False), flush=True))
    s.connect("writable-changed", lambda settings, key: print("writable", key, settings.is_writable(key), flush=True))
    def on_event(settings, keys, n):
        print("event", ",".join(sorted(GLib.quark_to_string(k) for k in keys)), flush=True)
        return False
    s.connect("change-event", on_event)
    for key in s.props.settings_schema.list_keys():
        s.get_value(key)
    print("ready", flush=True)
    settle(timeout=600)
    """#

    /// Reads a key once (the group is loaded), says `loaded`, waits for the file argv[2] to
    /// exist, reads it `argv[3]` times more, then reads a key of another path once (which must
    /// cost a ListProperties), says `done` and waits for argv[4] to exist before it exits.
    static let repeatedReads = prelude + "\n" + #"""
    key, go, count, leave = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
    import os
    s = Gio.Settings.new(ID)
    first = s.get_value(key)
    print("loaded", first.print_(False), flush=True)
    while not os.path.exists(go):
        time.sleep(0.01)
    for _ in range(count):
        check(s.get_value(key) == first, "the value stays")
    other = Gio.Settings.new(ID + ".other")
    other.get_string("label")
    print("done", flush=True)
    while not os.path.exists(leave):
        time.sleep(0.01)
    finish()
    """#

    /// g_settings_delay, three writes, g_settings_apply, sync: one write_tree. Prints whether
    /// each write was accepted and the values read after the sync.
    static let delayedApply = prelude + "\n" + #"""
    s = Gio.Settings.new(ID)
    s.delay()
    s.set_string("greeting", sys.argv[1])
    s.set_string("farewell", sys.argv[2])
    s.set_int("count", int(sys.argv[3]))
    s.apply()
    Gio.Settings.sync()
    settle(timeout=1)
    print("after", s.get_string("greeting"), "|", s.get_string("farewell"), "|", s.get_int("count"), flush=True)
    """#
}
