#!/usr/bin/env bash
# How fast hostile transforms are refused: the time of the refused Set and
# the daemon's CPU for it, for
#   - a 250-term `value + value + …` to_key and one ~1 MB Set (was 32.6 s CPU, 435 MB);
#   - a chain of 24 doubling bindings (`value + value`) and a 64-byte Set (was 5.7 s);
#   - an adversarial search: 67 `!contains(value, needle)` with a 4 KiB needle that
#     nearly matches at every position of a 1 MB value (it stalled the queue for minutes); and
#     the victim's Get latency while it runs, against the same Gets on a quiet daemon (a ratio).
#
#   bench/transform-bounds.sh [--runs N]
#
# Private bus, release propbusd, in-memory store. Prints the median and the max over N runs.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"
runs=5
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "transform-bounds: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
scripts/setup
swift build -c release --product propbusd >&2
bin=$(swift build -c release --show-bin-path)

bench_start_bus transform-bounds
"$bin/propbusd" --address "$ADDR" --in-memory & daemon=$!
pids+=("$daemon")
bench_wait_owner org.propbus.PropBus1

echo "refused Set, $runs runs, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
# python-dbus, because one argv string (busctl) is limited to 128 KiB.
/usr/bin/python3 - "$ADDR" "$daemon" "$runs" <<'PY'
import dbus, os, statistics, sys, time
address, daemon, runs = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
bus = dbus.bus.BusConnection(address)
root = bus.get_object('org.propbus.PropBus1', '/org/propbus/PropBus1')
manager = dbus.Interface(root, 'org.propbus.PropBus1.Manager')
tick = os.sysconf('SC_CLK_TCK')

def cpu():
    fields = open(f'/proc/{daemon}/stat').read().rsplit(')', 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / tick

def create(key):
    manager.CreateProperty(key, 's', dbus.String('', variant_level=1), dbus.Dictionary({}, signature='sv'))

def bind(key, to, expression):
    manager.Bind(key, to, dbus.Dictionary({'to_key': dbus.String(expression, variant_level=1),
                                           'direction': dbus.String('from', variant_level=1)}, signature='sv'))

def refused_set(key, value):
    group, name = key.rsplit('.', 1)
    target = bus.get_object('org.propbus.PropBus1', '/org/propbus/PropBus1/' + group.replace('.', '/'))
    wall, used = time.monotonic(), cpu()
    try:
        target.Set('org.propbus.PropBus1.Values', name, dbus.String(value, variant_level=1),
                   dbus_interface='org.freedesktop.DBus.Properties', timeout=120)
        error = 'accepted'
    except dbus.exceptions.DBusException as e:
        error = e.get_dbus_name().rsplit('.', 1)[1]
    return time.monotonic() - wall, cpu() - used, error

def report(label, samples):
    walls = [s[0] * 1000 for s in samples]
    cpus = [s[1] * 1000 for s in samples]
    print(f'{label:34} median {statistics.median(walls):7.1f} ms  max {max(walls):7.1f} ms  '
          f'daemon CPU median {statistics.median(cpus):6.0f} ms  ({samples[0][2]})')

create('bomb.source'); create('bomb.target')
bind('bomb.target', 'bomb.source', ' + '.join(['value'] * 250))
report('250-term bomb, 1 MB Set', [refused_set('bomb.source', 'x' * 1_000_000 + str(i)) for i in range(runs)])

for i in range(25): create(f'chain.k{i}')
for i in range(1, 25): bind(f'chain.k{i}', f'chain.k{i - 1}', 'value + value')
report('24 doubling bindings, 64-byte Set', [refused_set('chain.k0', str(i).rjust(64, 'd')) for i in range(runs)])

# The adversarial search, and a victim doing Gets meanwhile (another process, another connection).
import multiprocessing
def victim(address, stop, out):
    vbus = dbus.bus.BusConnection(address)
    props = dbus.Interface(vbus.get_object('org.propbus.PropBus1', '/org/propbus/PropBus1/search'),
                           'org.freedesktop.DBus.Properties')
    latencies = []
    while not stop.is_set() or not latencies:
        start = time.monotonic()
        props.Get('org.propbus.PropBus1.Values', 'victim', timeout=120)
        latencies.append(time.monotonic() - start)
    out.put(latencies)

def gets_while(attack):
    out, stop = multiprocessing.Queue(), multiprocessing.Event()
    process = multiprocessing.Process(target=victim, args=(address, stop, out))
    process.start()
    time.sleep(0.2)
    samples = attack() if attack else (time.sleep(2), [])[1]
    stop.set()
    latencies = out.get()
    process.join()
    return latencies, samples

manager.CreateProperty('search.needle', 's', dbus.String('', variant_level=1), dbus.Dictionary({}, signature='sv'))
create('search.source'); create('search.victim')
manager.CreateProperty('search.found', 'b', dbus.Boolean(False, variant_level=1), dbus.Dictionary({}, signature='sv'))
bind('search.found', 'search.source', ' && '.join(['!contains(value, search.needle)'] * 67))
search = dbus.Interface(bus.get_object('org.propbus.PropBus1', '/org/propbus/PropBus1/search'), 'org.freedesktop.DBus.Properties')
quiet, _ = gets_while(None)
quiet_median = statistics.median(quiet) * 1000
# A needle that nearly matches everywhere (4 KiB), in ASCII, precomposed and decomposed text.
for label, a, b in [('a', 'a', 'b'), ('é', '\u00e9', 'e'), ('e+U+0301', 'e\u0301', 'x')]:
    unit = len(a.encode())
    search.Set('org.propbus.PropBus1.Values', 'needle', dbus.String(b + a * (4095 // unit), variant_level=1))
    busy, samples = gets_while(lambda: [refused_set('search.source', a * (1_000_000 // unit - 8) + str(i)) for i in range(runs)])
    report(f'67 adversarial contains ({label}), 1 MB', samples)
    print(f'{"  victim Get meanwhile":34} worst {max(busy) * 1000:7.1f} ms  median {statistics.median(busy) * 1000:6.2f} ms  '
          f'quiet median {quiet_median:6.2f} ms  worst/quiet median {max(busy) * 1000 / quiet_median:6.0f}x  ({len(busy)} Gets)')
PY
kill "$daemon"; wait "$daemon" 2>/dev/null || true
