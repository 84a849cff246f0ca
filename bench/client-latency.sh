#!/usr/bin/env bash
# Client library latency: a property change observed through PropBusClient's `values` and the
# Python client's `values()`, next to a plain libdbus C client observing the same
# PropertiesChanged, in the same run; and what a cached read (`current`) costs in each library.
#
#   bench/client-latency.sh [--changes N] [--pause US]
#
# One writer sets an int32 key to 1..N (waiting for each reply, PAUSE µs apart, default 2000
# changes 1000 µs apart) on a private bus with a release propbusd (in-memory store); both
# observers run at the same time and stamp each change with CLOCK_MONOTONIC when it reaches
# them (`values` yielded it; libdbus popped the signal). Latency is that stamp minus the
# writer's stamp just before its Set. Prints p50/p99/max in microseconds for each and the
# ratio of the p50s to the C client's (goal for the Swift client: at most 1.2), then the mean
# cost of one cached read in each library (goal: at most 1 us). See bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"
changes=${CHANGES:-2000} pause=${PAUSE:-1000}
while [ $# -gt 0 ]; do
  case $1 in
    --changes) changes=$2; shift 2 ;;
    --pause) pause=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "client-latency: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
scripts/setup
bench_cc watch-latency
bench_bin propbusd ClientLatencyProbe

bench_start_bus client-latency
"$bin/propbusd" --address "$ADDR" --in-memory & pids+=($!)
bench_wait_owner org.propbus.PropBus1
busctl --address="$ADDR" call org.propbus.PropBus1 /org/propbus/PropBus1 org.propbus.PropBus1.Manager \
  CreateProperty ssva{sv} bench.value i i 0 0 >/dev/null
path=/org/propbus/PropBus1/bench


bench/build/watch-latency watch "$ADDR" "$path" value "$changes" > "$tmp/c.out" & pids+=($!); c_pid=$!
"$bin/ClientLatencyProbe" "$ADDR" bench.value "$changes" > "$tmp/swift.out" & pids+=($!); swift_pid=$!
/usr/bin/python3 bench/client_latency_probe.py "$ADDR" bench.value "$changes" > "$tmp/python.out" & pids+=($!); python_pid=$!
# All print "ready" first, once subscribed; only then does the writer start.
for _ in $(seq 300); do
  [ "$(head -n1 "$tmp/c.out" 2>/dev/null)" = ready ] && [ "$(head -n1 "$tmp/swift.out" 2>/dev/null)" = ready ] &&
    [ "$(head -n1 "$tmp/python.out" 2>/dev/null)" = ready ] && break
  sleep 0.05
done
bench/build/watch-latency write "$ADDR" "$path" value "$changes" "$pause" > "$tmp/sent"
wait "$c_pid" "$swift_pid" "$python_pid"

# p50 p99 max (µs) of observer time minus send time, matched by value.
latencies() {
  awk 'NR == FNR { sent[$1] = $2; next } $1 != "ready" && ($1 in sent) { print ($2 - sent[$1]) / 1000 }' "$tmp/sent" "$1" \
    | sort -g | awk '{ a[NR] = $1 } END { p99 = int(NR * 0.99); if (p99 < 1) p99 = 1; printf "%.1f %.1f %.1f %d\n", a[int((NR + 1) / 2)], a[p99], a[NR], NR }'
}
echo "A property change until an observer has it, $changes changes ${pause} us apart, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
read -r cp50 cp99 cmax cn < <(latencies "$tmp/c.out")
read -r sp50 sp99 smax sn < <(latencies "$tmp/swift.out")
read -r pp50 pp99 pmax pn < <(latencies "$tmp/python.out")
printf '%-34s p50 %8.1f us   p99 %8.1f us   max %8.1f us   (%d changes)\n' "plain libdbus C client (reference)" "$cp50" "$cp99" "$cmax" "$cn"
printf '%-34s p50 %8.1f us   p99 %8.1f us   max %8.1f us   (%d changes)   %.2fx the reference p50\n' \
  "PropBusClient property.values" "$sp50" "$sp99" "$smax" "$sn" "$(awk -v a="$sp50" -v b="$cp50" 'BEGIN { print a / b }')"
printf '%-34s p50 %8.1f us   p99 %8.1f us   max %8.1f us   (%d changes)   %.2fx the reference p50\n' \
  "Python propbus prop.values()" "$pp50" "$pp99" "$pmax" "$pn" "$(awk -v a="$pp50" -v b="$cp50" 'BEGIN { print a / b }')"
# A cached read (`current`): the mean of a million, in each library.
printf '%-34s %8.1f ns a read (goal: at most 1000)\n' "PropBusClient property.current" "$(awk '$1 == "cached-read" { print $2 }' "$tmp/swift.out")"
printf '%-34s %8.1f ns a read (goal: at most 1000)\n' "Python propbus prop.current" "$(awk '$1 == "cached-read" { print $2 }' "$tmp/python.out")"
