#!/usr/bin/env bash
# How long a history query for one key takes when the store holds many rows.
#
#   bench/history-query.sh [--rows N] [--keys K] [--calls C]
#
#   --rows N   history rows to pre-fill (default 1000000, bench/history-fill.sh)
#   --keys K   spread over K keys, so one key has N/K rows (default 10000)
#   --calls C  timed calls (default 20)
#   env PROPBUSD / BIN  as durable-writes.sh (default: a release build)
#
# Starts propbusd on a private bus with K keys, stops it, fills N rows, starts it again, then
# times Manager.ListHistory for one key (a full page: all its rows) from one python-dbus
# connection (/usr/bin/python3), C times; then from C (bench/ref/history-client.c, 10×C times:
# all its rows, its latest, and a span starting at a time for the key and for every key); and
# `propctl history KEY` end to end (a process per call) 5 times. Prints the median and worst
# (see bench/README.md).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"
rows=1000000 keys=10000 calls=20
while [ $# -gt 0 ]; do
  case $1 in
    --rows) rows=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    --calls) calls=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "history-query: unknown argument '$1' (try --help)" >&2; exit 64 ;;
  esac
done
bench_cc write-client glib-2.0
bench_cc history-client
if [ -n "${PROPBUSD:-}" ]; then
  propbusd=$PROPBUSD
  propctl=${PROPCTL:-$(dirname "$PROPBUSD")/propctl}
else
  bench_bin propbusd propctl
  propbusd="$bin/propbusd" propctl="$bin/propctl"
fi
bench_start_bus history-query
export DBUS_SESSION_BUS_ADDRESS=$ADDR
unset DBUS_SYSTEM_BUS_ADDRESS DBUS_STARTER_ADDRESS DBUS_STARTER_BUS_TYPE STATE_DIRECTORY
state="$tmp/propbus"
"$propbusd" --address "$ADDR" --state-dir "$state" --max-properties 200000 & pb=$!
pids+=("$pb")
bench_wait_owner org.propbus.PropBus1 || exit 1
bench/build/write-client "$ADDR" preload-propbus "$keys"
bench_stop_pid "$pb"; bench_wait_gone org.propbus.PropBus1
bench/history-fill.sh "$state" "$rows" "$keys"
# A time 100 rows before the last one: a span starting there is the last 100 rows.
recent=$(sqlite3 "$state/propbus.db" "SELECT time FROM history WHERE id >= (SELECT max(id) - 100 FROM history) ORDER BY id LIMIT 1")
"$propbusd" --address "$ADDR" --state-dir "$state" --max-properties 200000 & pb=$!
pids+=("$pb")
bench_wait_owner org.propbus.PropBus1 || exit 1
key="bench.k$(( keys / 2 ))"
/usr/bin/python3 - "$ADDR" "$key" "$calls" <<'PY'
import sys, time, dbus
address, key, calls = sys.argv[1], sys.argv[2], int(sys.argv[3])
bus = dbus.bus.BusConnection(address)
manager = dbus.Interface(bus.get_object("org.propbus.PropBus1", "/org/propbus/PropBus1"), "org.propbus.PropBus1.Manager")
def timed(label, call):
    times, count = [], 0
    for _ in range(calls):
        start = time.perf_counter()
        count = call()
        times.append((time.perf_counter() - start) * 1000)
    times.sort()
    print(f"{label}: {count} rows; median {times[len(times) // 2]:.1f} ms, worst {times[-1]:.1f} ms of {calls}")
empty = dbus.Dictionary({}, signature="sv")
# What a round trip costs here at all (the machine's load, python-dbus), then one row, then all.
timed("ListHistory of a key with no history (a round trip)", lambda: len(manager.ListHistory("nobody.here", dbus.UInt64(0), dbus.UInt32(0), empty)[0]))
timed(f"ListHistory {key} latest (one row)", lambda: len(manager.ListHistory(key, dbus.UInt64(0), dbus.UInt32(0), dbus.Dictionary({"latest": True}, signature="sv"))[0]))
timed(f"ListHistory {key} (all its rows)", lambda: len(manager.ListHistory(key, dbus.UInt64(0), dbus.UInt32(0), empty)[0]))
# The same, decoded by libdbus only (no python objects per value): the daemon's share.
timed(f"ListHistory {key} (all its rows, reply undecoded)", lambda: len(bus.call_blocking("org.propbus.PropBus1", "/org/propbus/PropBus1", "org.propbus.PropBus1.Manager", "ListHistory", "stua{sv}", (key, 0, 0, empty), byte_arrays=True) or []))
PY
# The same from C (libdbus only, the reply's rows counted, not decoded): the daemon's answer.
echo "ListHistory $key (all its rows), C client: $(bench/build/history-client "$ADDR" "$key" "$(( calls * 10 ))")"
echo "ListHistory $key latest, C client: $(bench/build/history-client "$ADDR" "$key" "$(( calls * 10 ))" latest)"
# A span starting at a time: one key's, and every key's (the last 100 rows of all).
echo "ListHistory $key since a time, C client: $(bench/build/history-client "$ADDR" "$key" "$(( calls * 10 ))" since "$recent")"
echo "ListHistory \"\" (every key) since a time, C client: $(bench/build/history-client "$ADDR" "" 5 since "$recent")"
ends=()
for _ in 1 2 3 4 5; do
  start=$(date +%s%N)
  "$propctl" history "$key" >/dev/null
  ends+=("$(( ($(date +%s%N) - start) / 1000000 ))")
done
echo "propctl history $key (a process per call): median $(bench_median "${ends[@]}") ms of 5 (${ends[*]})"
