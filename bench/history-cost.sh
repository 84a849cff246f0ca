#!/usr/bin/env bash
# History's cost per acknowledged write, in the daemon's own CPU time (perf stat task-clock:
# what the daemon spent, not how long it waited for the disk or for a CPU another process held,
# so a loaded shared machine changes it far less than writes/s); wall-clock writes/s beside it.
# (perf's instruction counter is not available in every VM; task-clock always is.)
#
#   bench/history-cost.sh [--seconds S] [--levels "0 10000 100000"] [--history-rows N]
#
# For each store size, with history on and with --no-history: a fresh store of that many keys
# (pre-filled with N history rows when asked, bench/history-fill.sh), then 1 and 16 writers
# as durable-writes.sh runs them, under `perf stat -e task-clock -p PID`. Prints CPU
# microseconds per write and the ratio on/off. env PROPBUSD / BIN as durable-writes.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"
seconds=3 levels="0 10000 100000" history_rows=0
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --levels) levels=$2; shift 2 ;;
    --history-rows) history_rows=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "history-cost: unknown argument '$1' (try --help)" >&2; exit 64 ;;
  esac
done
command -v perf >/dev/null || bench_need linux-perf
bench_cc write-client glib-2.0
if [ -n "${PROPBUSD:-}" ]; then propbusd=$PROPBUSD; else bench_bin propbusd; propbusd="$bin/propbusd"; fi
bench_start_bus history-cost '<limit name="reply_timeout">600000</limit>'
export DBUS_SESSION_BUS_ADDRESS=$ADDR
unset DBUS_SYSTEM_BUS_ADDRESS DBUS_STARTER_ADDRESS DBUS_STARTER_BUS_TYPE STATE_DIRECTORY

# measure PID WRITERS → "$per $rate": CPU µs per acknowledged write, writes/s
measure() {
  perf stat -e task-clock -x, -o "$tmp/perf.csv" -p "$1" 2>/dev/null & local perf_pid=$!
  sleep 0.3
  local out; out=$(bench/build/write-client "$ADDR" propbus "$2" "$seconds")
  kill -INT "$perf_pid"; wait "$perf_pid" 2>/dev/null || true
  local milliseconds writes
  milliseconds=$(awk -F, '$3 ~ /task-clock/ { print $1 }' "$tmp/perf.csv")
  writes=$(awk '{ print $1 }' <<<"$out")
  awk -v m="$milliseconds" -v w="$writes" -v r="$(awk '{ print $3 }' <<<"$out")" 'BEGIN { printf "%.1f %.0f", (w > 0 ? m * 1000 / w : 0), r }'
}

printf '%-8s %-12s %14s %10s %14s %10s\n' keys history "CPU µs/w (1)" "1 wr/s" "CPU µs/w (16)" "16 wr/s"
for level in $levels; do
  declare -A per
  for mode in on off; do
    args=(); [ "$mode" = off ] && args=(--no-history)
    state="$tmp/propbus-$level-$mode"
    "$propbusd" --address "$ADDR" --state-dir "$state" --max-properties 200000 "${args[@]}" 2>/dev/null & pb=$!
    pids+=("$pb")
    bench_wait_owner org.propbus.PropBus1 || exit 1
    bench/build/write-client "$ADDR" preload-propbus "$level"
    if [ "$history_rows" -gt 0 ]; then
      bench_stop_pid "$pb"; bench_wait_gone org.propbus.PropBus1
      bench/history-fill.sh "$state" "$history_rows" "$(( level > 0 ? level : 10000 ))" 2>/dev/null
      "$propbusd" --address "$ADDR" --state-dir "$state" --max-properties 200000 "${args[@]}" 2>/dev/null & pb=$!
      pids+=("$pb")
      bench_wait_owner org.propbus.PropBus1 || exit 1
    fi
    read -r i1 r1 <<<"$(measure "$pb" 1)"
    read -r i16 r16 <<<"$(measure "$pb" 16)"
    per[$mode]="$i1 $i16"
    printf '%-8s %-12s %14s %10s %14s %10s\n' "$level" "$mode" "$i1" "$r1" "$i16" "$r16"
    bench_stop_pid "$pb"; bench_wait_gone org.propbus.PropBus1
  done
  read -r on1 on16 <<<"${per[on]}"; read -r off1 off16 <<<"${per[off]}"
  awk -v l="$level" -v a="$on1" -v b="$off1" -v c="$on16" -v d="$off16" \
    'BEGIN { printf "%-8s %-12s %13.2fx %10s %13.2fx\n", l, "on/off", a / b, "", c / d }'
done
