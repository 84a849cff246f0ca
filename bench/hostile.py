#!/usr/bin/python3
"""The hostile-caller bench (bench/hostile.sh): a root driver and an unprivileged attacker.

  hostile.py driver ADDRESS DAEMON_PID SECONDS ONLY TMPDIR   (as root: sets up, measures, prints)
  hostile.py attack NAME ADDRESS SECONDS                      (as nobody, started by the driver)

The attacker speaks a line protocol on stdout: "ready" when the driver must act (create a
secret, run a command as root), then one JSON line with what it did and what it obtained. The
driver answers "go" on its stdin.
"""
import json, os, subprocess, sys, threading, time

import dbus
import dbus.lowlevel

NAME, ROOT = "org.propbus.PropBus1", "/org/propbus/PropBus1"
MANAGER, VALUES, COMMAND = NAME + ".Manager", NAME + ".Values", NAME + ".Command"
PROPS = "org.freedesktop.DBus.Properties"
SECRET, LATER_SECRET, OLD_SECRET = "hunter2-pin", "s3cret-later", "s3cret-deleted"
NEEDLE = "a" * 4095 + "b"
BIG_VALUE = "a" * 1_000_000            # under the default --max-value-size of 1 MiB
BIG_VALUE_LEN = len(BIG_VALUE)
PAGE_VALUE_LEN = 60_000                 # under --history-max-value-size: rows kept whole
WIDE_KEYS = 30                          # GetAll of the group: about 30 MB


def path_of(key):
    group, _, name = key.rpartition(".")
    return ROOT + "/" + group.replace(".", "/"), name


def s(value):
    return dbus.String(value, variant_level=1)


def call(bus, path, interface, member, *args, timeout=10):
    return bus.call_blocking(NAME, path, interface, member, None, args, timeout=timeout)


def dbus_error(error):
    return "%s: %s" % (error.get_dbus_name(), error.get_dbus_message()[:160])


# ---------------------------------------------------------------------------------------- attacker

def attack(name, address, seconds):
    bus = dbus.bus.BusConnection(address)
    manager = lambda member, *args, **kw: call(bus, ROOT, MANAGER, member, *args, **kw)
    deadline = time.monotonic() + seconds
    result = {"calls": 0, "refused": 0, "obtained": ""}

    def count(fn):
        try:
            fn()
        except dbus.DBusException as error:
            result["refused"] += 1
            result["last_error"] = dbus_error(error)
        result["calls"] += 1

    def ready():
        print("ready", flush=True)
        sys.stdin.readline()

    def start_many(path, text, count, stop_at_refusal):
        result["started"] = 0
        for _ in range(count):
            if time.monotonic() >= deadline:
                break
            result["calls"] += 1
            try:
                call(bus, path, COMMAND, "Start", s(text), timeout=30)
                result["started"] += 1
            except dbus.DBusException as error:
                result["refused"] += 1
                result["last_error"] = dbus_error(error)
                if stop_at_refusal:
                    break

    if name == "introspect":
        path = ROOT + "/big"
        while time.monotonic() < deadline:
            count(lambda: call(bus, path, "org.freedesktop.DBus.Introspectable", "Introspect"))
    elif name == "refused-set":
        path, prop = path_of("vault.pin")
        while time.monotonic() < deadline:
            count(lambda: call(bus, path, PROPS, "Set", VALUES, prop, s("x")))
    elif name == "contains-stall":
        # The 4 KiB needle comes from a key: a transform's own text is at most 4096 bytes.
        path, prop = path_of("pub.needle")
        count(lambda: call(bus, path, PROPS, "Set", VALUES, prop, s(NEEDLE)))
        transform = " && ".join(["!contains(value, pub.needle)"] * 67)
        count(lambda: manager("Bind", "pub.flag", "pub.src", {"direction": s("from"), "to_key": s(transform)}))
        path, prop = path_of("pub.src")
        n = 0
        while time.monotonic() < deadline:
            n += 1
            count(lambda: call(bus, path, PROPS, "Set", VALUES, prop, s(BIG_VALUE[: len(BIG_VALUE) - n % 2]), timeout=30))
    elif name == "persistent-bindings":
        made, connection = 0, bus
        while time.monotonic() < deadline:
            if made and made % 60 == 0:
                connection = dbus.bus.BusConnection(address)
            filler = "%s%08d" % ("f" * 4000, made)
            try:
                call(connection, ROOT, MANAGER, "Bind", "pub.a", "pub.b",
                     {"direction": s("from"), "persistent": dbus.Boolean(True, variant_level=1),
                      "to_key": s('value == "%s" ? value : value' % filler)})
                made += 1
            except dbus.DBusException as error:
                result["refused"] += 1
                result["last_error"] = dbus_error(error)
                if result["refused"] > 20:
                    break
            result["calls"] += 1
        result["made"] = made
    elif name == "command-input":
        start_many(ROOT + "/pub/cat", "a" * (30 << 20), 8, stop_at_refusal=False)
    elif name == "executions":
        start_many(ROOT + "/pub/sleep", "", 64, stop_at_refusal=True)
        ready()
    elif name == "secret-via-binding":
        # The transform reads vault.later only once pub.b says "go": at Bind time the key does
        # not exist, so there is nothing to refuse yet.
        count(lambda: manager("Bind", "pub.leak", "pub.b",
                              {"direction": s("from"), "persistent": dbus.Boolean(True, variant_level=1),
                               "to_key": s('value == "go" ? vault.later : ""')}))
        ready()
        path, prop = path_of("pub.b")
        count(lambda: call(bus, path, PROPS, "Set", VALUES, prop, s("go")))
        path, prop = path_of("pub.leak")
        try:
            leaked = str(call(bus, path, PROPS, "Get", VALUES, prop))
            if LATER_SECRET in leaked:
                result["obtained"] = "the secret vault.later through its binding"
        except dbus.DBusException as error:
            result["last_error"] = dbus_error(error)
    elif name == "model-file-secret":
        texts = []
        try:
            texts.append(str(call(bus, ROOT, PROPS, "Get", MANAGER, "SkippedModelFiles")))
        except dbus.DBusException as error:
            result["last_error"] = dbus_error(error)
        try:
            texts.append(str(manager("Reload")))
        except dbus.DBusException as error:
            texts.append(error.get_dbus_message())
        if any("hunter2" in text for text in texts):
            result["obtained"] = "a refused secret value quoted in SkippedModelFiles or Reload"
    elif name in ("signals-1m", "signals-4k"):
        # Connections subscribed to every signal of the daemon that never read one, and Sets of
        # a key nobody may write: each change's PropertiesChanged goes to them too.
        for _ in range(4):
            deaf = dbus.bus.BusConnection(address)
            deaf.add_match_string_non_blocking("type='signal',sender='%s'" % NAME)
            deaf.flush()
            result.setdefault("deaf", []).append(deaf)
        path, prop = path_of("pub.src")
        size = 1_000_000 if name == "signals-1m" else 4000
        n = 0
        while time.monotonic() < deadline:
            n += 1
            count(lambda: call(bus, path, PROPS, "Set", VALUES, prop, s(("%08d" % n) + "a" * (size - 8)), timeout=30))
        del result["deaf"]
    elif name == "history-values":
        # Large values into a persistent key, then into a transient one: rows of history and
        # records in memory, each holding old and new value.
        for key in ("pub.hist", "pub.tmp"):
            path, prop = path_of(key)
            n, until = 0, time.monotonic() + seconds / 2
            while time.monotonic() < min(until, deadline):
                n += 1
                count(lambda: call(bus, path, PROPS, "Set", VALUES, prop, s(("%08d" % n) + "h" * (BIG_VALUE_LEN - 8)), timeout=30))
    elif name == "history-scan":
        # Filters that match nothing, over all of history, and every page of a prefix.
        filters = [{"uid": dbus.UInt32(4242, variant_level=1)}, {"user": s("nosuchuser")}, {"until": dbus.UInt64(2**63, variant_level=1)}]
        after, n = 0, 0
        while time.monotonic() < deadline:
            n += 1
            flt = filters[n % len(filters)]
            count(lambda: manager("ListHistory", "", dbus.UInt64(0), dbus.UInt32(1000), dbus.Dictionary(flt, signature="sv"), timeout=30))
            try:
                rows, after = manager("ListHistory", "big.", dbus.UInt64(after), dbus.UInt32(1000), dbus.Dictionary({}, signature="sv"), timeout=30)
            except dbus.DBusException as error:
                result["refused"] += 1
                result["last_error"] = dbus_error(error)
            result["calls"] += 1
    elif name == "history-pages":
        # Pages of large rows (root wrote them at "ready"), again and again.
        ready()
        after = 0
        while time.monotonic() < deadline:
            try:
                rows, after = manager("ListHistory", "pub.page", dbus.UInt64(after), dbus.UInt32(1000), dbus.Dictionary({}, signature="sv"), timeout=30)
            except dbus.DBusException as error:
                result["refused"] += 1
                result["last_error"] = dbus_error(error)
                after = 0
            result["calls"] += 1
    elif name == "history-old-secret":
        # Root keeps a secret, deletes the key and creates it again as public (at "ready").
        ready()
        try:
            rows, _ = manager("ListHistory", "vault.old", dbus.UInt64(0), dbus.UInt32(0), dbus.Dictionary({}, signature="sv"))
            if OLD_SECRET in str(rows):
                result["obtained"] = "a deleted secret's value, through the history of its name's next definition"
        except dbus.DBusException as error:
            result["last_error"] = dbus_error(error)
        result["calls"] += 1
    elif name == "execute-replies":
        # 140 Executes of a command whose result is 1 MB, never read.
        for _ in range(140):
            message = dbus.lowlevel.MethodCallMessage(NAME, ROOT + "/pub/out", COMMAND, "Execute")
            message.append(s(""), signature="v")
            bus.send_message(message)
        bus.flush()
        result["calls"] = 140
        time.sleep(seconds)
    elif name == "layer-file-nul":
        # Root reloads a layer file holding a NUL (at "ready"); what anyone reads of it.
        ready()
        try:
            call(bus, ROOT, PROPS, "Get", MANAGER, "SkippedModelFiles")
        except dbus.DBusException as error:
            # Its own reply quota, spent by an earlier attack, is not the daemon failing.
            if error.get_dbus_name().endswith(".LimitsExceeded"):
                result["refused"] += 1
                result["last_error"] = dbus_error(error)
            else:
                result["obtained"] = "SkippedModelFiles fails for everyone (%s)" % error.get_dbus_name()
        result["calls"] += 1
    elif name == "slow-readers":
        # Four connections, two large replies asked for on each, none ever read.
        readers = [dbus.bus.BusConnection(address) for _ in range(4)]
        for reader in readers:
            for _ in range(2):
                message = dbus.lowlevel.MethodCallMessage(NAME, ROOT + "/wide", PROPS, "GetAll")
                message.append(VALUES, signature="s")
                reader.send_message(message)
            reader.flush()
        result["calls"] = 8
        time.sleep(seconds)
    elif name == "slow-reader":
        # Five large replies asked for and never read: libdbus reads only when asked to.
        for _ in range(5):
            message = dbus.lowlevel.MethodCallMessage(NAME, ROOT + "/wide", PROPS, "GetAll")
            message.append(VALUES, signature="s")
            bus.send_message(message)
        bus.flush()
        result["calls"] = 5
        time.sleep(seconds)
    else:
        raise SystemExit("unknown attack " + name)
    print(json.dumps(result), flush=True)


# ------------------------------------------------------------------------------------------ driver

ATTACKS = ["introspect", "refused-set", "contains-stall", "persistent-bindings", "command-input",
           "executions", "secret-via-binding", "model-file-secret", "slow-reader", "slow-readers",
           "signals-1m", "signals-4k", "execute-replies", "layer-file-nul", "history-values",
           "history-old-secret", "history-pages", "history-scan"]
# The reply quota's window (--max-reply-bytes-per-uid): attacks start that far apart.
QUOTA_WINDOW = 10
# Rows of history written before "history-scan" (Applies of the 1,000-key group).
HISTORY_ROWS = int(os.environ.get("HOSTILE_HISTORY_ROWS", "180000"))


class Sampler:
    """The victim's Get latencies and the daemon's RSS, kept per phase."""

    def __init__(self, address, pid):
        self.bus = dbus.bus.BusConnection(address)
        self.pid, self.phase, self.stop = pid, None, False
        self.latency, self.rss = {}, {}
        self.path, self.prop = path_of("victim.x")
        threading.Thread(target=self.victim, daemon=True).start()
        threading.Thread(target=self.memory, daemon=True).start()

    def victim(self):
        while not self.stop:
            phase, start = self.phase, time.monotonic()
            try:
                call(self.bus, self.path, PROPS, "Get", VALUES, self.prop, timeout=10)
            except dbus.DBusException:
                pass  # a timeout counts as its 10 s
            self.latency.setdefault(phase, []).append((time.monotonic() - start) * 1000)
            time.sleep(0.002)

    def resident(self):
        try:
            for line in open("/proc/%d/status" % self.pid):
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
        except OSError:
            pass
        return 0.0

    def memory(self):
        while not self.stop:
            self.rss.setdefault(self.phase, []).append(self.resident())
            time.sleep(0.05)


def setup(bus):
    manager = lambda member, *args: call(bus, ROOT, MANAGER, member, *args, timeout=60)
    nobody = {"writers": dbus.Array(["nobody"], signature="s", variant_level=1)}
    manager("CreateProperty", "victim.x", "i", dbus.Int32(7, variant_level=1), dbus.Dictionary({}, signature="sv"))
    for n in range(1000):
        manager("CreateProperty", "big.k%04d" % n, "s", s("v" * 20), dbus.Dictionary({}, signature="sv"))
    for key in ["pub.src", "pub.needle", "pub.a", "pub.b", "pub.leak", "pub.hist", "pub.page"]:
        manager("CreateProperty", key, "s", s(""), dbus.Dictionary(nobody, signature="sv"))
    manager("CreateProperty", "pub.tmp", "s", s(""), dbus.Dictionary(dict(nobody, persistent=dbus.Boolean(False, variant_level=1)), signature="sv"))
    manager("CreateProperty", "pub.flag", "b", dbus.Boolean(False, variant_level=1), dbus.Dictionary(nobody, signature="sv"))
    manager("CreateProperty", "vault.pin", "s", s(SECRET), dbus.Dictionary(
        {"secret": dbus.Boolean(True, variant_level=1), "writers": dbus.Array(["root"], signature="s", variant_level=1)}, signature="sv"))
    for n in range(WIDE_KEYS):
        manager("CreateProperty", "wide.k%02d" % n, "s", s(BIG_VALUE[:-n - 1]), dbus.Dictionary({"persistent": dbus.Boolean(False, variant_level=1)}, signature="sv"))
    run_by_nobody = {"writers": dbus.Array(["nobody"], signature="s", variant_level=1), "concurrent": dbus.Boolean(True, variant_level=1)}
    manager("CreateCommand", "pub.cat", dbus.Dictionary(dict(run_by_nobody, exec=dbus.Array(["/bin/cat"], signature="s", variant_level=1)), signature="sv"))
    manager("CreateCommand", "pub.sleep", dbus.Dictionary(dict(run_by_nobody, exec=dbus.Array(["/bin/sleep", "30"], signature="s", variant_level=1)), signature="sv"))
    manager("CreateCommand", "pub.out", dbus.Dictionary(dict(run_by_nobody, exec=dbus.Array(["/bin/sh", "-c", "head -c 1000000 /dev/zero | tr '\\0' a"], signature="s", variant_level=1)), signature="sv"))
    manager("CreateCommand", "root.echo", dbus.Dictionary({"exec": dbus.Array(["/bin/echo", "hi"], signature="s", variant_level=1)}, signature="sv"))


def act(bus, name):
    """What root does while the attacker waits at "ready"; returns what that shows."""
    if name == "executions":
        try:
            call(bus, ROOT + "/root/echo", COMMAND, "Execute", s(""), timeout=20)
            return ""
        except dbus.DBusException as error:
            return "root refused an execution (%s)" % error.get_dbus_name().rpartition(".")[2]
    if name == "history-pages":
        path, prop = path_of("pub.page")
        for n in range(200):
            call(bus, path, PROPS, "Set", VALUES, prop, s(("%08d" % n) + "p" * (PAGE_VALUE_LEN - 8)))
    if name == "history-old-secret":
        secret = {"secret": dbus.Boolean(True, variant_level=1), "writers": dbus.Array(["root"], signature="s", variant_level=1)}
        call(bus, ROOT, MANAGER, "CreateProperty", "vault.old", "s", s(OLD_SECRET), dbus.Dictionary(secret, signature="sv"))
        path, prop = path_of("vault.old")
        call(bus, path, PROPS, "Set", VALUES, prop, s(OLD_SECRET + "-2"))
        call(bus, ROOT, MANAGER, "DeleteProperty", "vault.old")
        call(bus, ROOT, MANAGER, "CreateProperty", "vault.old", "s", s("public"), dbus.Dictionary({}, signature="sv"))
    if name == "layer-file-nul":
        etc = os.environ["HOSTILE_CONFIG_DIR"]
        os.makedirs(etc + "/defaults.d", exist_ok=True)
        with open(etc + "/defaults.d/10-nul.json", "w") as f:
            f.write('{"big.k0001": "v\\u0000w", "big.k\\u0000": 1}')
        try:
            call(bus, ROOT, MANAGER, "Reload", timeout=30)
            call(bus, ROOT, PROPS, "Get", MANAGER, "SkippedModelFiles")
        except dbus.DBusException as error:
            return "root's Reload or SkippedModelFiles failed (%s)" % dbus_error(error)
    if name == "secret-via-binding":
        call(bus, ROOT, MANAGER, "CreateProperty", "vault.later", "s", s(LATER_SECRET), dbus.Dictionary(
            {"secret": dbus.Boolean(True, variant_level=1), "writers": dbus.Array(["root"], signature="s", variant_level=1)}, signature="sv"))
    return ""


def clean_up(bus):
    """Ends what an attack left behind (executions, bindings), so the next starts from the same state."""
    try:
        for execution_id, key, _ in call(bus, ROOT, MANAGER, "ListExecutions"):
            path = ROOT + "/" + str(key).replace(".", "/")
            try:
                call(bus, path, COMMAND, "Cancel", dbus.UInt64(execution_id))
            except dbus.DBusException:
                pass
    except dbus.DBusException:
        pass
    try:
        for row in call(bus, ROOT, MANAGER, "ListBindings", timeout=60):
            try:
                call(bus, ROOT, MANAGER, "Unbind", row[0])
            except dbus.DBusException:
                pass
    except dbus.DBusException as error:
        print("hostile: ListBindings failed after the attack: %s" % dbus_error(error), file=sys.stderr)


def percentile(samples, q):
    samples = sorted(samples)
    return samples[min(len(samples) - 1, int(q * len(samples)))] if samples else float("nan")


def store_size(tmp):
    """The bytes of the daemon's state directory (the store, its WAL)."""
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(os.path.join(tmp, "state")) for f in fs)


def fill_history(bus, rows):
    """Writes about `rows` rows of history as root: Applies of the 1,000-key group."""
    for n in range(rows // 1000):
        values = dbus.Dictionary({"big.k%04d" % k: s("f%07d" % n) for k in range(1000)}, signature="sv")
        call(bus, ROOT, MANAGER, "Apply", values, dbus.Array([], signature="s"), timeout=120)


def driver(address, pid, seconds, only, tmp):
    pid, seconds = int(pid), float(seconds)
    names = [n for n in ATTACKS if not only or n in only.split(",")]
    bus = dbus.bus.BusConnection(address)
    setup(bus)
    sampler = Sampler(address, pid)
    sampler.phase = "idle"
    time.sleep(1.0)
    start_rss = max(sampler.rss.get("idle", [0]))
    here = os.path.dirname(os.path.abspath(__file__))
    rows = []
    for name in names:
        if name == "history-scan" and HISTORY_ROWS:
            sampler.phase = "fill"
            started = time.monotonic()
            fill_history(bus, HISTORY_ROWS)
            print("hostile: %d rows of history written in %.1f s" % (HISTORY_ROWS, time.monotonic() - started), file=sys.stderr)
        # Each attack starts with the uid's reply quota whole: the last one's charges (10 s
        # window) would refuse this one's calls before they test anything.
        if rows:
            sampler.phase = "pause"
            time.sleep(QUOTA_WINDOW + 0.5)
        alive_before = os.path.exists("/proc/%d" % pid)
        store_before = store_size(tmp)
        sampler.phase = name
        attacker = subprocess.Popen(
            ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--reset-env",
             "/usr/bin/python3", os.path.join(here, "hostile.py"), "attack", name, address, str(seconds)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, cwd="/")
        obtained, report = [], {}
        for line in attacker.stdout:
            line = line.strip()
            if line == "ready":
                what = act(bus, name)
                if what:
                    obtained.append(what)
                attacker.stdin.write("go\n")
                attacker.stdin.flush()
            elif line.startswith("{"):
                report = json.loads(line)
        attacker.wait()
        sampler.phase = name + "/after"
        clean_up(bus)
        if report.get("obtained"):
            obtained.append(report["obtained"])
        if not os.path.exists("/proc/%d" % pid) and alive_before:
            obtained.append("the daemon is gone")
        latencies = sampler.latency.get(name, [])
        grown = (store_size(tmp) - store_before) / 1048576
        rows.append((name, max(sampler.rss.get(name, [0])), percentile(latencies, 0.5),
                     max(latencies) if latencies else float("nan"), report, "; ".join(obtained) or "nothing", grown))
    sampler.stop = True
    store = store_size(tmp)
    print("\nhostile caller (uid nobody), %.0f s per attack; daemon RSS at start %.1f MiB; store %.1f MiB at the end"
          % (seconds, start_rss, store / 1048576))
    print("%-20s %9s %8s %9s %9s %9s  %s" % ("attack", "peak MiB", "×start", "Get p50", "Get max", "store +MiB", "attacker's calls / refused; obtained"))
    worst_ratio, worst_get, anything = 0.0, 0.0, False
    for name, peak, p50, worst, report, obtained, grown in rows:
        ratio = peak / start_rss if start_rss else float("nan")
        worst_ratio, worst_get = max(worst_ratio, ratio), max(worst_get, worst)
        anything = anything or obtained != "nothing"
        detail = "%s/%s" % (report.get("calls", "?"), report.get("refused", "?"))
        for extra in ("made", "started"):
            if extra in report:
                detail += " %s %s" % (extra, report[extra])
        print("%-20s %9.1f %8.2f %7.1fms %7.1fms %9.1f  %s; %s" % (name, peak, ratio, p50, worst, grown, detail, obtained))
        if report.get("last_error"):
            print("%-20s last refusal: %s" % ("", report["last_error"]))
    print("goals: peak ≤ 2× start + quota (worst here %.2f×), victim's worst Get ≤ 250 ms (worst here %.1f ms), nothing obtained (%s)"
          % (worst_ratio, worst_get, "something was" if anything else "met"))


if __name__ == "__main__":
    if sys.argv[1] == "driver":
        driver(*sys.argv[2:7])
    else:
        attack(sys.argv[2], sys.argv[3], float(sys.argv[4]))
