#!/usr/bin/env bash
# History's cost as a count: the daemon's instructions per durable write under callgrind, with
# history on and with --no-history, from the difference of two runs of N1 and N2 writes per
# writer (start-up, loading and exit cancel out). A count does not move with the machine's load.
#
#   bench/history-callgrind.sh [--writers W] [--keys K] [--history-rows N] [--writes "N1 N2"] [--modes "on off"] [--keep DIR]
#
#   --writers W       concurrent writers (default 1; 16 as durable-writes.sh's second case)
#   --keys K          other keys in the store besides the writers' (default 0)
#   --history-rows N  history rows pre-filled into the store (bench/history-fill.sh; default 0)
#   --writes "N1 N2"  writes per writer of the two runs (default "200 1200")
#   --modes "on off"  which to measure (default both)
#   --keep DIR        keep the callgrind outputs there (callgrind_annotate --inclusive=yes)
#   env PROPBUSD      the daemon (default: a release build)
#
# Each run starts the daemon under valgrind on a copy of the same prepared store, so the two
# runs of a mode start alike. Prints "MODE INSTRUCTIONS/write" per mode and the ratio on/off.
# With 16 writers a commit carries as many writes as arrive while the last one commits, which
# valgrind's slowness changes from run to run: compare the parts (callgrind_annotate) as well.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"
writers=1 keys=0 history_rows=0 writes="200 1200" modes="on off" keep=
while [ $# -gt 0 ]; do
  case $1 in
    --writers) writers=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    --history-rows) history_rows=$2; shift 2 ;;
    --writes) writes=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --keep) keep=$2; mkdir -p "$keep"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "history-callgrind: unknown argument '$1' (try --help)" >&2; exit 64 ;;
  esac
done
command -v valgrind >/dev/null || bench_need valgrind
bench_cc write-client glib-2.0
if [ -n "${PROPBUSD:-}" ]; then propbusd=$PROPBUSD; else bench_bin propbusd; propbusd="$bin/propbusd"; fi
read -r n1 n2 <<<"$writes"
bench_start_bus history-callgrind '<limit name="reply_timeout">600000</limit>'
export DBUS_SESSION_BUS_ADDRESS=$ADDR
unset DBUS_SYSTEM_BUS_ADDRESS DBUS_STARTER_ADDRESS DBUS_STARTER_BUS_TYPE STATE_DIRECTORY

args_of() { if [ "$1" = off ]; then echo --no-history; else echo --history-max-rows 100000000; fi; }

# The prepared store: the writers' keys and K others, then N history rows.
"$propbusd" --address "$ADDR" --state-dir "$tmp/prepared" --max-properties 200000 2>/dev/null & pb=$!; pids+=("$pb")
bench_wait_owner org.propbus.PropBus1
bench/build/write-client "$ADDR" preload-propbus "$keys"
bench_stop_pid "$pb"; bench_wait_gone org.propbus.PropBus1
[ "$history_rows" -gt 0 ] && bench/history-fill.sh "$tmp/prepared" "$history_rows" "$(( keys > 0 ? keys : 1000 ))"

# total MODE N → the daemon's instructions for a run of N writes per writer
total() {
  rm -rf "$tmp/state"; cp -a "$tmp/prepared" "$tmp/state"
  # shellcheck disable=SC2046
  valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$propbusd" --address "$ADDR" --state-dir "$tmp/state" \
    --max-properties 200000 $(args_of "$1") 2>/dev/null & local vg=$!; pids+=("$vg")
  for _ in $(seq 1200); do bench_has_owner org.propbus.PropBus1 && break; sleep 0.1; done
  bench/build/write-client "$ADDR" propbus "$writers" 600 "$2" >/dev/null
  kill -TERM "$vg"; wait "$vg" 2>/dev/null || true
  for _ in $(seq 100); do bench_has_owner org.propbus.PropBus1 || break; sleep 0.1; done
  [ -z "$keep" ] || cp "$tmp/cg.out" "$keep/cg-$1-$writers-$2.out"
  awk '/^summary:|^totals:/ { print $2; exit }' "$tmp/cg.out"
}

declare -A per
for mode in $modes; do
  a=$(total "$mode" "$n1"); b=$(total "$mode" "$n2")
  per[$mode]=$(awk -v a="$a" -v b="$b" -v n=$(( (n2 - n1) * writers )) 'BEGIN { printf "%.0f", (b - a) / n }')
  echo "$mode ${per[$mode]} instructions/write ($writers writers, $keys keys, $history_rows history rows; runs of $n1 and $n2: $a, $b)"
done
if [ -n "${per[on]:-}" ] && [ -n "${per[off]:-}" ]; then
  awk -v on="${per[on]}" -v off="${per[off]}" 'BEGIN { printf "on/off %.3f\n", on / off }'
fi
