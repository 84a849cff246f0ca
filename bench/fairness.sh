#!/usr/bin/env bash
# Fairness: a victim's Properties.Get latency while another connection floods the daemon.
#
#   bench/fairness.sh [--calls N] [--properties N]
#
# Runs on a private bus with a release propbusd (in-memory store). The flooder pipelines N
# (default 5000) ListProperties("flood.") over a group of --properties (default 200) keys and
# reads the replies as they come; meanwhile a second connection times Get one call at a time.
# Prints the victim's p50/p99/max idle and during the flood, and the daemon's peak RSS.
# See bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"
calls=5000
properties=200
while [ $# -gt 0 ]; do
  case $1 in
    --calls) calls=$2; shift 2 ;;
    --properties) properties=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "fairness: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
scripts/setup
swift build -c release --product propbusd >&2
bin=$(swift build -c release --show-bin-path)

bench_start_bus fairness
"$bin/propbusd" --address "$ADDR" --in-memory & pid=$!
pids+=("$pid")
bench_wait_owner org.propbus.PropBus1

/usr/bin/python3 - "$ADDR" "$calls" "$properties" "$pid" <<'PY'
import dbus, dbus.lowlevel, subprocess, sys, time
address, calls, properties, pid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
bus = dbus.bus.BusConnection(address)
root = bus.get_object("org.propbus.PropBus1", "/org/propbus/PropBus1")
manager = dbus.Interface(root, "org.propbus.PropBus1.Manager")
for n in range(properties):
    manager.CreateProperty("flood.p%04d" % n, "s", dbus.String("v" * 100, variant_level=1), dbus.Dictionary({}, signature="sv"))
manager.CreateProperty("victim.x", "i", dbus.Int32(7, variant_level=1), dbus.Dictionary({}, signature="sv"))
victim = bus.get_object("org.propbus.PropBus1", "/org/propbus/PropBus1/victim")

def get():
    start = time.monotonic()
    victim.Get("org.propbus.PropBus1.Values", "x", dbus_interface="org.freedesktop.DBus.Properties")
    return (time.monotonic() - start) * 1e6

def stats(samples):
    samples = sorted(samples)
    pick = lambda q: samples[min(len(samples) - 1, int(q * len(samples)))]
    return pick(0.5), pick(0.99), samples[-1], len(samples)

def rss_peak():
    for line in open("/proc/%s/status" % pid):
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) // 1024
    return 0

for _ in range(200): get()
idle = stats([get() for _ in range(2000)])
rss_idle = rss_peak()
# The flooder reads its replies in a thread of its own (a GLib main loop in a child process).
flooder = subprocess.Popen(["/usr/bin/python3", "-c", r'''
import dbus, dbus.lowlevel, dbus.mainloop.glib, sys
from gi.repository import GLib
dbus.mainloop.glib.DBusGMainLoop(set_as_default=True)
bus = dbus.bus.BusConnection(sys.argv[1]); count = int(sys.argv[2])
loop = GLib.MainLoop(); seen = [0]
def on_message(connection, message):
    if isinstance(message, (dbus.lowlevel.MethodReturnMessage, dbus.lowlevel.ErrorMessage)):
        seen[0] += 1
        if seen[0] == count: loop.quit()
bus.add_message_filter(on_message)
for _ in range(count):
    m = dbus.lowlevel.MethodCallMessage("org.propbus.PropBus1", "/org/propbus/PropBus1", "org.propbus.PropBus1.Manager", "ListProperties")
    m.append("flood.", signature="s"); bus.send_message(m)
bus.flush(); print("sent", flush=True); loop.run()
''', address, str(calls)], stdout=subprocess.PIPE, text=True)
flooder.stdout.readline()
start = time.monotonic()
during = []
while flooder.poll() is None:
    during.append(get())
flood_seconds = time.monotonic() - start
flood = stats(during)
print("victim Get during %d pipelined ListProperties of %d keys (%.1f s), %s CPUs" % (calls, properties, flood_seconds, subprocess.check_output(["nproc"], text=True).strip()))
print("%-8s p50 %9.0f us   p99 %9.0f us   max %9.0f us   (%d gets)" % (("idle",) + idle))
print("%-8s p50 %9.0f us   p99 %9.0f us   max %9.0f us   (%d gets)" % (("flood",) + flood))
print("propbusd peak RSS: %d MB idle, %d MB after the flood" % (rss_idle, rss_peak()))
PY
