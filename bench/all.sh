#!/usr/bin/env bash
# Every row of the lean-and-fast table, side by side in one run, as one table.
#
#   bench/all.sh [--quick] [--existing]
#
#   --quick      fewer runs and calls per row (a smoke run of a minute or two, not figures)
#   --existing   then rerun the other benches' headline numbers (durable writes without dconf,
#                transient writes, binding, file binding, command and fleet latency); several
#                more minutes
#   env BIN      a directory holding prebuilt propbusd and propctl to measure, instead of
#                building them in release mode (e.g. a static build, or another checkout's)
#
# Each row is measured against a reference in the same run (dbus-send, the C libdbus service of
# bench/ref/ref-service.c, the python-dbus service bench/ref/ref-service.py, or a trivial call),
# so the ratios hold on a noisy shared machine where absolute times do not. Every service runs
# on one private dbus-daemon; stores of 10,000 and 100,000 properties are generated once and
# cached under bench/build/. Prints the table (also saved under bench/out/). See bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"

quick=0 existing=0
while [ $# -gt 0 ]; do
  case $1 in
    --quick) quick=1; shift ;;
    --existing) existing=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "all: unknown argument '$1' (try --help)" >&2; exit 64 ;;
  esac
done
# runs: one-shot commands (each), start-ups of each service at 10k, at 100k and from a model,
# GetManagedObjects and ListProperties calls, rounds of the listing against its C floor, Get
# rounds and calls per round.
if [ "$quick" -eq 1 ]; then
  oneshots=6 starts=2 starts_big=1 gmo_calls=3 list_calls=2 floor_rounds=1 get_rounds=2 get_calls=3000
else
  oneshots=40 starts=5 starts_big=3 gmo_calls=15 list_calls=5 floor_rounds=3 get_rounds=5 get_calls=20000
fi
PY=/usr/bin/python3   # the system's python, where Debian's python3-dbus lives
NAME=org.propbus.PropBus1 ROOT=/org/propbus/PropBus1 VALUES=org.propbus.PropBus1.Values

# --- build ---------------------------------------------------------------------------
scripts/setup
$PY -c 'import dbus, gi' 2>/dev/null || bench_need python3-dbus python3-gi
for prog in ready-client run-timer call-client get-client; do bench_cc "$prog"; done
bench_cc ref-service sqlite3
bench_bin propbusd propctl
mkdir -p bench/out

bench_start_bus all
export DBUS_SESSION_BUS_ADDRESS=$ADDR
# No model files or state of this machine's user may leak in.
export XDG_CONFIG_HOME="$tmp/config" XDG_STATE_HOME="$tmp/state"
unset DBUS_SYSTEM_BUS_ADDRESS DBUS_STARTER_ADDRESS DBUS_STARTER_BUS_TYPE STATE_DIRECTORY

# start NAME -- COMMAND...: starts a service, sets $ms (exec to NAME owned) and $pid.
start() {
  local name=$1; shift 2
  read -r ms pid < <(bench/build/ready-client "$ADDR" "$name" -- "$@")
  [ -n "${pid:-}" ] || { echo "all: $1 did not start" >&2; exit 1; }
  pids+=("$pid")
}
# stop NAME PID
stop() { bench_stop_pid "$2"; bench_wait_gone "$1"; }
# rss PID: resident KiB once start-up work has settled.
rss() { sleep 0.3; awk '/^VmRSS/ { print $2 }' "/proc/$1/status"; }
propbusd=("$bin/propbusd" --address "$ADDR" --max-properties 200000)

# --- generated inputs (cached) -----------------------------------------------------------
# The store is made by propbusd itself (schema, options encoding), then filled in bulk by
# gen-props.py; the cache is keyed by the store's code, so any change to it rebuilds the stores.
store_code=$(cat Sources/PropBusSystem/Store/*.swift Sources/DBusValues/ValueCodec.swift | cksum | cut -d' ' -f1)
store_for() { # COUNT → sets $store, the cached state directory of COUNT properties in 100 groups
  store="$PWD/bench/build/stores/$store_code-$1"
  if [ ! -f "$store/propbus.db" ]; then
    echo "all: generating a store of $1 properties" >&2
    rm -rf "$store"
    start "$NAME" -- "${propbusd[@]}" --state-dir "$store"
    busctl --address="$ADDR" call "$NAME" "$ROOT" org.propbus.PropBus1.Manager CreateProperty 'ssva{sv}' \
      bench.template i i 0 0 >/dev/null
    stop "$NAME" "$pid"
    $PY bench/ref/gen-props.py store "$store/propbus.db" "$1" 100
  fi
}
copy_store() { rm -rf "$2"; cp -r "$1" "$2"; }   # each start gets a pristine copy
model="bench/build/model-10000.json"
[ -f "$model" ] || $PY bench/ref/gen-props.py model "$model" 10000 100

# --- rows --------------------------------------------------------------------------------
rows=()
# row WORK REFERENCE PROPBUS RATIO GOAL MET
row() {
  rows+=("$(printf '%s\t%s\t%s\t%s\t%s\t%s' "$@")")
  printf '%-48s | %-26s | %-24s | %-6s | %-16s | %s\n' "$@" >&2
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
met() { awk -v v="$1" -v g="$2" 'BEGIN { print (v <= g ? "yes" : "NO") }'; }   # VALUE GOAL
mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }

# Empty daemon (fresh store) vs the C service: RSS. The daemon stays up for the one-shot row.
start "$NAME" -- "${propbusd[@]}" --state-dir "$tmp/empty"; pb=$pid pb_ms=$ms pb_rss=$(rss "$pid")
start org.propbus.Ref1 -- bench/build/ref-service "$ADDR" org.propbus.Ref1; c_pid=$pid c_rss=$(rss "$pid")
stop org.propbus.Ref1 "$c_pid"
pb_file=$(awk '/^RssFile/ { print $2 }' "/proc/$pb/status")
row "propbusd empty: RSS (ready in $pb_ms ms)" "C libdbus $(mib "$c_rss") MiB" \
  "$(mib "$pb_rss") MiB ($(mib "$pb_file") file)" "$(ratio "$pb_rss" "$c_rss")" "<= 10 MiB" "$(met "$(mib "$pb_rss")" 10)"

# propctl get, one shot, vs dbus-send, paired and alternating.
busctl --address="$ADDR" call "$NAME" "$ROOT" org.propbus.PropBus1.Manager CreateProperty 'ssva{sv}' bench.x i i 7 0 >/dev/null
[ "$("$bin/propctl" --address "$ADDR" get bench.x)" = 7 ] || { echo "all: propctl get bench.x is not 7" >&2; exit 1; }
{ read -r ds _; read -r pc _; } < <(bench/build/run-timer "$oneshots" \
  -- dbus-send --bus="$ADDR" --print-reply --dest="$NAME" "$ROOT/bench" org.freedesktop.DBus.Properties.Get \
     "string:$VALUES" string:x \
  -- "$bin/propctl" --address "$ADDR" get bench.x)
r=$(ratio "$pc" "$ds")
row "propctl get KEY, one shot (p50 of $oneshots)" "dbus-send $(ratio "$ds" 1000) ms" "$(ratio "$pc" 1000) ms" "$r" "<= 2x" "$(met "$r" 2)"
stop "$NAME" "$pb"

# 10,000 stored properties in 100 groups: propbusd, python-dbus and C, interleaved rounds.
store_for 10000; s10k=$store
p_ms=() p_rss=() y_ms=() y_rss=() c_ms=() c_rss=()
for round in $(seq "$starts"); do
  copy_store "$s10k" "$tmp/s10k"
  start "$NAME" -- "${propbusd[@]}" --state-dir "$tmp/s10k"; p_ms+=("$ms"); p_rss+=("$(rss "$pid")")
  if [ "$round" -lt "$starts" ]; then stop "$NAME" "$pid"; else pb=$pid; fi   # the last one stays up
  start org.propbus.RefPy -- $PY bench/ref/ref-service.py "$ADDR" org.propbus.RefPy "$s10k/propbus.db"
  y_ms+=("$ms"); y_rss+=("$(rss "$pid")"); stop org.propbus.RefPy "$pid"
  start org.propbus.Ref1 -- bench/build/ref-service "$ADDR" org.propbus.Ref1 "$s10k/propbus.db"
  c_ms+=("$ms"); c_rss+=("$(rss "$pid")"); stop org.propbus.Ref1 "$pid"
done
pm=$(bench_median "${p_ms[@]}") ym=$(bench_median "${y_ms[@]}") cm=$(bench_median "${c_ms[@]}")
row "ready, 10k stored properties / 100 groups" "python $ym ms, C $cm ms" "$pm ms" "$(ratio "$pm" "$ym")" "<= 30 ms" "$(met "$pm" 30)"
pr=$(bench_median "${p_rss[@]}") yr=$(bench_median "${y_rss[@]}") cr=$(bench_median "${c_rss[@]}")
row "RSS with those 10k properties" "python $(mib "$yr"), C $(mib "$cr") MiB" "$(mib "$pr") MiB" "$(ratio "$pr" "$yr")" "<= 15 MiB" "$(met "$(mib "$pr")" 15)"

# Calls on the 10k daemon: GetManagedObjects and ListProperties("") vs a trivial call (Peer.Ping).
read -r ping _ < <(bench/build/call-client "$ADDR" "$NAME" "$ROOT" org.freedesktop.DBus.Peer Ping 200)
{ read -r gmo _; read -r gmo_bytes; } < <(bench/build/call-client "$ADDR" "$NAME" "$ROOT" \
  org.freedesktop.DBus.ObjectManager GetManagedObjects "$gmo_calls")
row "GetManagedObjects, 10k / 100 groups ($(mib $((gmo_bytes / 1024))) MiB)" "Ping $(ratio "$ping" 1000) ms" "$(ratio "$gmo" 1000) ms" \
  "$(ratio "$gmo" "$ping")" "<= 20 ms" "$(met "$(ratio "$gmo" 1000)" 20)"
{ read -r list _; read -r list_bytes; } < <(bench/build/call-client "$ADDR" "$NAME" "$ROOT" \
  org.propbus.PropBus1.Manager ListProperties "$list_calls" "")
row "ListProperties(\"\"), 10k ($(mib $((list_bytes / 1024))) MiB reply)" "Ping $(ratio "$ping" 1000) ms" "$(ratio "$list" 1000) ms" \
  "$(ratio "$list" "$ping")" "<= 40 ms" "$(met "$(ratio "$list" 1000)" 40)"
# The same listing with each definition said once; a build without it says so.
if compact_out=$(bench/build/call-client "$ADDR" "$NAME" "$ROOT" org.propbus.PropBus1.Manager ListPropertiesCompact "$list_calls" "" 2>/dev/null); then
  { read -r compact _; read -r compact_bytes; } <<<"$compact_out"
  row "ListPropertiesCompact(\"\"), 10k ($(mib $((compact_bytes / 1024))) MiB reply)" "Ping $(ratio "$ping" 1000) ms" "$(ratio "$compact" 1000) ms" \
    "$(ratio "$compact" "$ping")" "<= 40 ms" "$(met "$(ratio "$compact" 1000)" 40)"
else
  row "ListPropertiesCompact(\"\"), 10k" "-" "not in this build" "-" "<= 40 ms" "-"
fi
# The floor of that listing: ref-service.c sends propbusd's reply body, byte for byte,
# as a copy of a message made once (no libdbus check of the body: the least any libdbus service
# can do) and the way propbusd sends it (the body checked by dbus_message_demarshal per call).
# Alternating rounds against propbusd, the same client; CPU per call of each service and of the
# bus relaying (utime+stime, /proc/PID/stat, 10 ms ticks over every round's calls), and of the
# client reading the reply (bash's `time`: its connection and its untimed first call included).
CALL_CLIENT_SAVE="$tmp/listing.bin" bench/build/call-client "$ADDR" "$NAME" "$ROOT" org.propbus.PropBus1.Manager ListProperties 1 "" >/dev/null
start org.propbus.Ref1 -- bench/build/ref-service "$ADDR" org.propbus.Ref1 - "$tmp/listing.bin"; floor_pid=$pid
body() { tail -c "$(od -An -tu4 -j4 -N4 "$1" | tr -d ' ')" "$1"; }   # a saved message's body
for method in ListProperties ListPropertiesChecked; do
  CALL_CLIENT_SAVE="$tmp/floor.bin" bench/build/call-client "$ADDR" org.propbus.Ref1 "$ROOT" org.propbus.PropBus1.Manager "$method" 1 "" >/dev/null
  cmp -s <(body "$tmp/listing.bin") <(body "$tmp/floor.bin") || { echo "all: ref-service's $method body differs from propbusd's" >&2; exit 1; }
done
ticks() { local stat; read -r stat < "/proc/$1/stat"; set -- ${stat##*) }; echo $(( ${12} + ${13} )); }
bus_pid=${pids[0]} hz=$(getconf CLK_TCK) TIMEFORMAT='%3U %3S'
declare -A wall=() cpu=() relay=() reader=()
for _ in $(seq "$floor_rounds"); do
  for subject in propbusd copy checked; do
    case $subject in
      propbusd) dest=$NAME method=ListProperties spid=$pb ;;
      copy) dest=org.propbus.Ref1 method=ListProperties spid=$floor_pid ;;
      checked) dest=org.propbus.Ref1 method=ListPropertiesChecked spid=$floor_pid ;;
    esac
    s0=$(ticks "$spid") b0=$(ticks "$bus_pid")
    { time bench/build/call-client "$ADDR" "$dest" "$ROOT" org.propbus.PropBus1.Manager "$method" "$list_calls" "" >"$tmp/call.out"; } 2>"$tmp/call.time"
    read -r p50 _ <"$tmp/call.out"; read -r user system <"$tmp/call.time"
    wall[$subject]+="$p50 " cpu[$subject]=$(( ${cpu[$subject]:-0} + $(ticks "$spid") - s0 )) relay[$subject]=$(( ${relay[$subject]:-0} + $(ticks "$bus_pid") - b0 ))
    reader[$subject]=$(awk -v a="${reader[$subject]:-0}" -v u="$user" -v s="$system" 'BEGIN { print a + (u + s) * 1000 }')
  done
done
stop org.propbus.Ref1 "$floor_pid"
calls_made=$(( (list_calls + 1) * floor_rounds ))   # call-client makes one untimed call first
ms() { awk -v t="$1" -v n="$calls_made" -v hz="$hz" 'BEGIN { printf "%.0f", t * 1000 / hz / n }'; }   # ticks → ms per call
cpus() { echo "CPU $(ms "${cpu[$1]}") + bus $(ms "${relay[$1]}") + client $(awk -v t="${reader[$1]}" -v n="$calls_made" 'BEGIN { printf "%.0f", t / n }') ms"; }
# shellcheck disable=SC2086
pw=$(bench_median ${wall[propbusd]}) fw=$(bench_median ${wall[copy]}) cw=$(bench_median ${wall[checked]})
row "ListProperties(\"\"), 10k vs the C floor (same bytes)" "C copy $(ratio "$fw" 1000) ms ($(cpus copy))" \
  "$(ratio "$pw" 1000) ms ($(cpus propbusd))" "$(ratio "$pw" "$fw")" "<= 40 ms" "$(met "$(ratio "$pw" 1000)" 40) (floor: $(met "$(ratio "$fw" 1000)" 40))"
row "ListProperties(\"\"), 10k vs C sending them checked" "C demarshal $(ratio "$cw" 1000) ms ($(cpus checked))" \
  "$(ratio "$pw" 1000) ms" "$(ratio "$pw" "$cw")" "<= 40 ms" "$(met "$(ratio "$pw" 1000)" 40) (C: $(met "$(ratio "$cw" 1000)" 40))"
stop "$NAME" "$pb"

# 100,000 properties: propbusd vs the C service.
store_for 100000; s100k=$store
p_ms=() p_rss=() c_ms=() c_rss=()
for _ in $(seq "$starts_big"); do
  copy_store "$s100k" "$tmp/s100k"
  start "$NAME" -- "${propbusd[@]}" --state-dir "$tmp/s100k"; p_ms+=("$ms"); p_rss+=("$(rss "$pid")"); stop "$NAME" "$pid"
  start org.propbus.Ref1 -- bench/build/ref-service "$ADDR" org.propbus.Ref1 "$s100k/propbus.db"
  c_ms+=("$ms"); c_rss+=("$(rss "$pid")"); stop org.propbus.Ref1 "$pid"
done
pm=$(bench_median "${p_ms[@]}") cm=$(bench_median "${c_ms[@]}")
row "ready, 100k stored properties" "C $cm ms" "$pm ms" "$(ratio "$pm" "$cm")" "<= 400 ms" "$(met "$pm" 400)"
pr=$(bench_median "${p_rss[@]}") cr=$(bench_median "${c_rss[@]}")
row "RSS, 100k stored properties" "C $(mib "$cr") MiB" "$(mib "$pr") MiB" "$(ratio "$pr" "$cr")" "<= 60 MiB" "$(met "$(mib "$pr")" 60)"

# A model file declaring 10,000 properties, in memory (parse, check, register, export).
p_ms=()
for _ in $(seq "$starts_big"); do
  start "$NAME" -- "${propbusd[@]}" --in-memory --model "$model"; p_ms+=("$ms"); stop "$NAME" "$pid"
done
pm=$(bench_median "${p_ms[@]}")
row "ready from a model file of 10k properties" "-" "$pm ms" "-" "<= 60 ms" "$(met "$pm" 60)"

# Properties.Get against the C service: get-roundtrip.sh's machinery, synchronous and pipelined.
roundtrip() { # WINDOW CALLS → the median line's fields: ref wall, propbusd wall, ratio, ref cpu, …
  BIN=$bin bench/get-roundtrip.sh --rounds "$get_rounds" --calls "$2" --window "$1" >"$tmp/roundtrip.out" 2>"$tmp/roundtrip.err" ||
    { echo "all: bench/get-roundtrip.sh failed:" >&2; tail -20 "$tmp/roundtrip.err" >&2; return 1; }
  awk '$1 == "median" { print $2, $3, $4, $5, $6, $7 }' "$tmp/roundtrip.out"
}
medians=$(roundtrip 1 "$get_calls")
read -r rw pw wr rc pc cr <<<"$medians"
row "sync Properties.Get: service CPU per call" "C $rc us" "$pc us" "$cr" "<= 1.3x" "$(met "$cr" 1.3)"
row "sync Properties.Get: client wall per call" "C $rw us" "$pw us" "$wr" "<= 1.1x" "$(met "$wr" 1.1)"
medians=$(roundtrip 64 $((get_calls * 2)))
read -r rw pw wr rc pc cr <<<"$medians"
row "pipelined Get, window 64: wall per call" "C $rw us" "$pw us" "$wr" "<= 1.1x" "$(met "$wr" 1.1)"

# --- report --------------------------------------------------------------------------
out="bench/out/all-$(date -u +%Y%m%d-%H%M%S).txt"
{
  echo "bench/all.sh$([ "$quick" -eq 1 ] && echo ' --quick') $(date -u +%Y-%m-%dT%H:%M:%SZ), git $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
  linked() { ldd "$1" | grep -q libswiftCore && echo "shared Swift runtime" || echo "static Swift runtime"; }
  echo "propbusd $(du -k "$bin/propbusd" | cut -f1) KiB ($(linked "$bin/propbusd")), propctl $(du -k "$bin/propctl" | cut -f1) KiB ($(linked "$bin/propctl")), from $bin"
  echo
  printf '| %s | %s | %s | %s | %s | %s |\n' work reference propbus ratio goal met
  echo "| --- | --- | --- | --- | --- | --- |"
  printf '%s\n' "${rows[@]}" | awk -F '\t' '{ printf "| %s | %s | %s | %s | %s | %s |\n", $1, $2, $3, $4, $5, $6 }'
} | tee "$out"
echo "(saved to $out)" >&2

if [ "$existing" -eq 1 ]; then
  # The other benches' headline numbers, so that no feature gets slower unseen.
  export BIN=$bin
  bench/durable-writes.sh --no-dconf --levels "0 10000" --seconds 3
  bench/transient-writes.sh
  bench/binding-latency.sh
  bench/file-binding.sh
  bench/render.sh
  bench/command-latency.sh
  bench/fleet.sh
fi
