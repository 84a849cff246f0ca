#!/usr/bin/env bash
# History's cost per acknowledged write, in the daemon's own CPU time (perf stat task-clock:
# what the daemon spent, not how long it waited for the disk or for a CPU another process held,
# so a loaded shared machine changes it far less than writes/s); wall-clock writes/s beside it.
# (perf's instruction counter is not available in every VM; task-clock always is.)
#
#   bench/history-cost.sh [--seconds S] [--levels "0 10000 100000"] [--history-rows N] [--pairs P] [--pages]
#
#   --pairs P  measure on and off alternately P times each (default 3) and compare medians:
#              on a shared machine the load moves between runs more than history costs
#   --pages    also count the pages SQLite writes (pwrite64 calls of a page's size, to the WAL
#              and by checkpoints to the database) per acknowledged write and per fsync (one
#              commit), from one more 16-writer run of each mode under strace: a count, which
#              the machine's load does not change (strace's slowness does change how many
#              writes a group commit carries, for both modes alike)
#
# For each store size, with history on and with --no-history: a fresh store of that many keys
# (pre-filled with N history rows when asked, bench/history-fill.sh), then 1 and 16 writers
# as durable-writes.sh runs them, under `perf stat -e task-clock -p PID`. Prints CPU
# microseconds per write and the ratio on/off. env PROPBUSD / BIN as durable-writes.sh.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"
seconds=3 levels="0 10000 100000" history_rows=0 pairs=3 pages=0
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --levels) levels=$2; shift 2 ;;
    --history-rows) history_rows=$2; shift 2 ;;
    --pairs) pairs=$2; shift 2 ;;
    --pages) pages=1; shift ;;
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

# start MODE STATE → $pb: a daemon on that store (history on, or --no-history). The row bound
# is raised above what the pre-fill leaves, so no pruning runs while writes are timed.
start() {
  local args=(--history-max-rows 100000000); [ "$1" = off ] && args=(--no-history)
  "$propbusd" --address "$ADDR" --state-dir "$2" --max-properties 200000 "${args[@]}" 2>/dev/null & pb=$!
  pids+=("$pb")
  bench_wait_owner org.propbus.PropBus1 || exit 1
}
# pages PID WRITERS → "$per_write $per_fsync": pages SQLite wrote per acknowledged write, per fsync
pages() {
  strace -f -e trace=pwrite64,fsync,fdatasync -o "$tmp/strace.out" -p "$1" 2>/dev/null & local strace_pid=$!
  sleep 0.5
  local out; out=$(bench/build/write-client "$ADDR" propbus "$2" "$seconds")
  kill -INT "$strace_pid"; wait "$strace_pid" 2>/dev/null || true
  awk -v w="$(awk '{ print $1 }' <<<"$out")" '
    /pwrite64\(/ && / = 4096$/ { p++ } /fsync\(|fdatasync\(/ && / = 0$/ { f++ }
    END { printf "%.2f %.1f", (w > 0 ? p / w : 0), (f > 0 ? p / f : 0) }' "$tmp/strace.out"
}
median() { printf '%s\n' "$@" | sort -g | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

printf '%-8s %-8s %14s %10s %14s %10s   (medians of %s runs)\n' keys history "CPU µs/w (1)" "1 wr/s" "CPU µs/w (16)" "16 wr/s" "$pairs"
for level in $levels; do
  for mode in on off; do
    start "$mode" "$tmp/propbus-$level-$mode"
    bench/build/write-client "$ADDR" preload-propbus "$level"
    bench_stop_pid "$pb"; bench_wait_gone org.propbus.PropBus1
    if [ "$history_rows" -gt 0 ]; then
      bench/history-fill.sh "$tmp/propbus-$level-$mode" "$history_rows" "$(( level > 0 ? level : 10000 ))" 2>/dev/null
    fi
  done
  declare -A c1 r1 c16 r16
  for mode in on off; do c1[$mode]= r1[$mode]= c16[$mode]= r16[$mode]=; done
  for _ in $(seq "$pairs"); do
    for mode in on off; do
      start "$mode" "$tmp/propbus-$level-$mode"
      read -r a b <<<"$(measure "$pb" 1)"; c1[$mode]+=" $a" r1[$mode]+=" $b"
      read -r a b <<<"$(measure "$pb" 16)"; c16[$mode]+=" $a" r16[$mode]+=" $b"
      bench_stop_pid "$pb"; bench_wait_gone org.propbus.PropBus1
    done
  done
  if [ "$pages" -eq 1 ]; then
    for mode in on off; do
      start "$mode" "$tmp/propbus-$level-$mode"
      read -r a b <<<"$(pages "$pb" 16)"
      printf '%-8s %-8s pages/write (16) %s, pages/fsync %s\n' "$level" "$mode" "$a" "$b"
      bench_stop_pid "$pb"; bench_wait_gone org.propbus.PropBus1
    done
  fi
  declare -A m
  for mode in on off; do
    m[$mode]="$(median ${c1[$mode]}) $(median ${r1[$mode]}) $(median ${c16[$mode]}) $(median ${r16[$mode]})"
    read -r a b c d <<<"${m[$mode]}"
    printf '%-8s %-8s %14s %10s %14s %10s\n' "$level" "$mode" "$a" "$b" "$c" "$d"
  done
  read -r a b c d <<<"${m[on]}"; read -r e f g h <<<"${m[off]}"
  awk -v l="$level" -v a="$a" -v b="$b" -v c="$c" -v d="$d" -v e="$e" -v f="$f" -v g="$g" -v h="$h" \
    'BEGIN { printf "%-8s %-8s %13.2fx %9.2fx %13.2fx %9.2fx\n", l, "on/off", a / e, b / f, c / g, d / h }'
done
