#!/usr/bin/env bash
# Instructions per synchronous Properties.Get: propbusd vs the C reference, under callgrind.
#
#   bench/get-callgrind.sh [--calls N]
#
#   --calls N   Gets counted per service (default 3000, env CALLS)
#   env BIN     measure $BIN/propbusd instead of building one in release mode
#   env KEEP    a directory to copy the callgrind files to (for callgrind_annotate)
#
# Both services run under `valgrind --tool=callgrind --instr-atstart=no` on one private bus;
# instrumentation is switched on (`callgrind_control -i on`) only around the counted calls,
# after 200 warm-up calls, so start-up and the warm-up are not counted. Instruction counts do
# not move with the machine's load the way CPU time does. See bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"

calls=${CALLS:-3000}
while [ $# -gt 0 ]; do
  case $1 in
    --calls) calls=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "get-callgrind: unknown argument '$1' (try --help)" >&2; exit 64 ;;
  esac
done
command -v valgrind >/dev/null || { echo "get-callgrind: needs valgrind (apt-get install valgrind)" >&2; exit 1; }

OBJ=/org/propbus/PropBus1/bench IFACE=org.propbus.PropBus1.Values
scripts/setup
mkdir -p bench/out
bench_cc ref-service sqlite3
bench_cc get-client
bench_bin propbusd

bench_start_bus callgrind
grind=(valgrind --tool=callgrind --instr-atstart=no)

"${grind[@]}" --callgrind-out-file="$tmp/ref.cg" bench/build/ref-service "$ADDR" org.propbus.Ref1 >"$tmp/ref.log" 2>&1 &
ref_pid=$!; pids+=("$ref_pid")
bench_wait_started org.propbus.Ref1 "$ref_pid" "$tmp/ref.log" 60
STATE_DIRECTORY="$tmp/state" XDG_STATE_HOME="$tmp/xdg-state" "${grind[@]}" --callgrind-out-file="$tmp/subj.cg" \
  "$bin/propbusd" --address "$ADDR" >"$tmp/subject.log" 2>&1 &
subj_pid=$!; pids+=("$subj_pid")
bench_wait_started org.propbus.PropBus1 "$subj_pid" "$tmp/subject.log" 60
busctl --address="$ADDR" --timeout=60 call org.propbus.PropBus1 /org/propbus/PropBus1 \
  org.propbus.PropBus1.Manager CreateProperty 'ssva{sv}' bench.x i i 7 0

count() { # NAME PID FILE -> instructions per Get
  bench/build/get-client "$ADDR" "$1" "$OBJ" "$IFACE" x 200 0 1 >/dev/null
  callgrind_control -i on "$2" >/dev/null
  bench/build/get-client "$ADDR" "$1" "$OBJ" "$IFACE" x "$calls" 0 1 >/dev/null
  callgrind_control -i off "$2" >/dev/null
  callgrind_control -d "$2" >/dev/null
  local total
  for _ in $(seq 100); do grep -qs '^totals:' "$3".* && break; sleep 0.1; done
  total=$(cat "$3".* | awk '/^totals:/ { t += $2 } END { print t + 0 }')
  echo $(( total / calls ))
}
ref=$(count org.propbus.Ref1 "$ref_pid" "$tmp/ref.cg")
subj=$(count org.propbus.PropBus1 "$subj_pid" "$tmp/subj.cg")
[ -n "${KEEP:-}" ] && mkdir -p "$KEEP" && cp "$tmp"/*.cg.* "$KEEP"/
out="bench/out/get-callgrind-$(date +%Y%m%d-%H%M%S).txt"
awk -v ref="$ref" -v subj="$subj" -v calls="$calls" -v rev="$(git rev-parse --short HEAD 2>/dev/null || echo '?')" 'BEGIN {
  printf "Properties.Get under callgrind, %d synchronous calls, git %s\n", calls, rev
  printf "instructions per Get: ref-service %d, propbusd %d, ratio %.2f\n", ref, subj, subj / ref
}' | tee "$out"
