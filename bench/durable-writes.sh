#!/usr/bin/env bash
# Acknowledged durable writes per second: propbusd vs dconf-service, on one private bus.
#
#   bench/durable-writes.sh [--seconds S] [--levels "0 1000 10000 100000"] [--no-dconf] [--no-strace]
#
#   --seconds S   length of each timed run (default 3, env SECONDS_PER_RUN)
#   --levels L    store sizes to test, in keys (default "0 1000 10000 100000", env LEVELS)
#   --no-dconf    skip the dconf-service reference
#   --dconf-max-keys N  run dconf only at store sizes up to N (default 10000, env DCONF_MAX_KEYS):
#                 loading 100,000 keys into dconf alone takes over ten minutes
#   --no-strace   skip the fsync count (a second, traced run per case)
#   env PROPBUSD  use this propbusd binary instead of building one in release mode
#   env BIN       the same, $BIN/propbusd
#   env PROPBUSD_ARGS  more propbusd options, e.g. "--no-history" (history's cost: run with and without)
#   --history-rows N  pre-fill each store with N rows of change history before the timed runs
#                 (bench/history-fill.sh; env HISTORY_ROWS), e.g. 1000000
#
# For each store size and each service: 1 sequential writer, then 16 concurrent writers (one
# connection each), every write waiting for its reply. A second run of each case under
# `strace -c -f -e trace=fsync,fdatasync` counts fsyncs per acknowledged write (strace slows
# the service, so throughput is taken from the untraced run). Then propbusd's startup time
# (exec to name owned) and RSS with the 10,000-key store. Prints a table (also saved under
# bench/out/). See bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"

seconds=${SECONDS_PER_RUN:-3} levels=${LEVELS:-"0 1000 10000 100000"} dconf=1 trace=1
history_rows=${HISTORY_ROWS:-0}
dconf_max=${DCONF_MAX_KEYS:-10000}
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --levels) levels=$2; shift 2 ;;
    --no-dconf) dconf=0; shift ;;
    --dconf-max-keys) dconf_max=$2; shift 2 ;;
    --no-strace) trace=0; shift ;;
    --history-rows) history_rows=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "durable-writes: unknown argument '$1' (try --help)" >&2; exit 64 ;;
  esac
done

# --- build ---------------------------------------------------------------------------
scripts/setup
need=()
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v strace >/dev/null || need+=(strace)
pkg-config --exists glib-2.0 || need+=(libglib2.0-dev)
[ -x /usr/libexec/dconf-service ] || need+=(dconf-service)
bench_need "${need[@]}"
mkdir -p bench/out
bench_cc write-client glib-2.0
bench_cc ready-client
client=bench/build/write-client
if [ -n "${PROPBUSD:-}" ]; then
  propbusd=$PROPBUSD   # a prebuilt binary, e.g. from another checkout
else
  bench_bin propbusd
  propbusd="$bin/propbusd"
fi

# --- private bus ---------------------------------------------------------------------
bench_start_bus durable '<limit name="reply_timeout">600000</limit>'
export DBUS_SESSION_BUS_ADDRESS=$ADDR
unset DBUS_SYSTEM_BUS_ADDRESS DBUS_STARTER_ADDRESS DBUS_STARTER_BUS_TYPE STATE_DIRECTORY

wait_owner() { bench_wait_owner "$1" || exit 1; }

# run_case SERVICE_PID TARGET WRITERS → sets $rate and $fsyncs (per acknowledged write)
run_case() {
  local pid=$1 target=$2 writers=$3 out calls writes
  out=$("$client" "$ADDR" "$target" "$writers" "$seconds")
  rate=$(awk '{ printf "%.0f", $3 }' <<<"$out")
  fsyncs="-"
  if [ "$trace" -eq 1 ]; then
    # -f with -p attaches every thread of the service.
    strace -c -f -e trace=fsync,fdatasync -o "$tmp/strace.out" -p "$pid" 2>/dev/null &
    local strace_pid=$!
    sleep 0.5
    out=$("$client" "$ADDR" "$target" "$writers" "$seconds")
    kill -INT "$strace_pid"; wait "$strace_pid" 2>/dev/null || true
    writes=$(awk '{ print $1 }' <<<"$out")
    calls=$(awk '$NF == "fsync" || $NF == "fdatasync" { n += $4 } END { print n + 0 }' "$tmp/strace.out")
    fsyncs=$(awk -v c="$calls" -v w="$writes" 'BEGIN { printf "%.3f", (w > 0 ? c / w : 0) }')
  fi
}

rows=()
for level in $levels; do
  # propbusd, with a fresh store of $level keys
  state="$tmp/propbus-$level"
  "$propbusd" --address "$ADDR" --state-dir "$state" --max-properties 200000 ${PROPBUSD_ARGS:-} & pb=$!
  pids+=("$pb")
  wait_owner org.propbus.PropBus1
  "$client" "$ADDR" preload-propbus "$level"
  if [ "$history_rows" -gt 0 ]; then
    # A store already holding that much history: filled while the daemon is stopped.
    bench_stop_pid "$pb"; bench_wait_gone org.propbus.PropBus1
    bench/history-fill.sh "$state" "$history_rows" "$(( level > 0 ? level : 10000 ))"
    "$propbusd" --address "$ADDR" --state-dir "$state" --max-properties 200000 ${PROPBUSD_ARGS:-} & pb=$!
    pids+=("$pb")
    wait_owner org.propbus.PropBus1
  fi
  run_case "$pb" propbus 1; p1=$rate f1=$fsyncs
  run_case "$pb" propbus 16; p16=$rate f16=$fsyncs
  bench_stop_pid "$pb"; bench_wait_gone org.propbus.PropBus1
  rows+=("$(printf '%-8s %-9s %10s %10s %11s %11s' "$level" propbusd "$p1" "$p16" "$f1" "$f16")")
  echo "${rows[-1]}" >&2

  if [ "$dconf" -eq 1 ] && [ "$level" -le "$dconf_max" ]; then
    config="$tmp/dconf-$level"
    mkdir -p "$config/runtime"
    chmod 700 "$config/runtime"
    XDG_CONFIG_HOME="$config" XDG_RUNTIME_DIR="$config/runtime" /usr/libexec/dconf-service & dc=$!
    pids+=("$dc")
    wait_owner ca.desrt.dconf
    "$client" "$ADDR" preload-dconf "$level"
    run_case "$dc" dconf 1; d1=$rate g1=$fsyncs
    run_case "$dc" dconf 16; d16=$rate g16=$fsyncs
    bench_stop_pid "$dc"; bench_wait_gone ca.desrt.dconf
    rows+=("$(printf '%-8s %-9s %10s %10s %11s %11s' "$level" dconf "$d1" "$d16" "$g1" "$g16")")
    echo "${rows[-1]}" >&2
    ratio1=$(awk -v a="$p1" -v b="$d1" 'BEGIN { printf "%.1f", (b > 0 ? a / b : 0) }')
    ratio16=$(awk -v a="$p16" -v b="$d16" 'BEGIN { printf "%.1f", (b > 0 ? a / b : 0) }')
    rows+=("$(printf '%-8s %-9s %9sx %9sx' "$level" ratio "$ratio1" "$ratio16")")
  fi
done

# --- startup with 10,000 stored properties --------------------------------------------
startup="-"
if [ -d "$tmp/propbus-10000" ]; then
  times=() rss=()
  for _ in 1 2 3 4 5; do
    read -r ms pid < <(bench/build/ready-client "$ADDR" org.propbus.PropBus1 -- "$propbusd" --address "$ADDR" --state-dir "$tmp/propbus-10000" --max-properties 200000 ${PROPBUSD_ARGS:-})
    pids+=("$pid")
    sleep 0.3
    rss+=("$(awk '/^VmRSS/ { print $2 }' "/proc/$pid/status")")
    times+=("$ms")
    bench_stop_pid "$pid"; bench_wait_gone org.propbus.PropBus1
  done
  startup="startup with 10,016 stored properties (median of 5): $(bench_median "${times[@]}") ms exec to name owned, $(awk -v k="$(bench_median "${rss[@]}")" 'BEGIN { printf "%.1f", k / 1024 }') MiB RSS"
fi

{
  echo "durable-writes $(date -u +%Y-%m-%dT%H:%M:%SZ), ${seconds}s per run, $(nproc) CPUs, store in $(df --output=source,fstype "$tmp" | tail -1 | tr -s ' '), propbusd ${PROPBUSD_ARGS:-(no options)}, history rows pre-filled: $history_rows"
  printf '%-8s %-9s %10s %10s %11s %11s\n' keys service "1 writer/s" "16 writr/s" "fsync/w (1)" "fsync/w(16)"
  printf '%s\n' "${rows[@]}"
  echo "$startup"
} | tee "bench/out/durable-writes-$(date -u +%Y%m%d-%H%M%S).txt"
