#!/usr/bin/env bash
# Where propbusd spends its time, with perf: start-up on the 10k store of bench/all.sh, or the
# synchronous Properties.Get path. Prints the top symbols (inclusive, demangled) and saves the
# perf data under bench/out/ for `perf report -i`.
#
#   bench/profile.sh start       start-up until the name is owned, 10,000 stored properties
#   bench/profile.sh get [N]     N synchronous Gets (default 30000), perf attached to the daemon
#   bench/profile.sh list [N]    N ListProperties("") on the 10k store (default 20)
#   bench/profile.sh gmo [N]     N GetManagedObjects on the 10k store (default 50)
#   env BIN   profile $BIN/propbusd instead of a release build's
#
# Run bench/all.sh once first (it generates the cached 10k store).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"

mode=${1:-} calls=${2:-}
case $mode in
  start|get|list|gmo) ;;
  -h|--help|*) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 64 ;;
esac
command -v perf >/dev/null || bench_need linux-perf
bench_cc ready-client
bench_cc get-client
bench_cc call-client
bench_bin propbusd
mkdir -p bench/out
data="$PWD/bench/out/profile-$mode-$(date -u +%Y%m%d-%H%M%S).data"

bench_start_bus profile
export XDG_CONFIG_HOME="$tmp/config" XDG_STATE_HOME="$tmp/state"
NAME=org.propbus.PropBus1
store=$(ls -td bench/build/stores/*-10000 2>/dev/null | head -1 || true)   # the newest; none yet is fine for `get`
if [ "$mode" != get ]; then
  [ -n "$store" ] || { echo "profile: no cached 10k store; run bench/all.sh --quick first" >&2; exit 1; }
  cp -r "$store" "$tmp/s10k"
fi
if [ "$mode" = start ]; then
  read -r ms pid < <(bench/build/ready-client "$ADDR" "$NAME" -- \
    perf record -F 4999 -g -o "$data" -- "$bin/propbusd" --address "$ADDR" --state-dir "$tmp/s10k")
  pids+=("$pid")
  echo "ready in $ms ms under perf" >&2
  kill -INT "$pid"; bench_wait_gone "$NAME"; sleep 0.5   # perf passes SIGINT on and writes the data
elif [ "$mode" = list ] || [ "$mode" = gmo ]; then
  read -r ms pid < <(bench/build/ready-client "$ADDR" "$NAME" -- "$bin/propbusd" --address "$ADDR" --state-dir "$tmp/s10k")
  pids+=("$pid")
  if [ "$mode" = list ]; then
    call() { bench/build/call-client "$ADDR" "$NAME" /org/propbus/PropBus1 org.propbus.PropBus1.Manager ListProperties "$1" ""; }
    calls=${calls:-20}
  else
    call() { bench/build/call-client "$ADDR" "$NAME" /org/propbus/PropBus1 org.freedesktop.DBus.ObjectManager GetManagedObjects "$1"; }
    calls=${calls:-50}
  fi
  call 2 >/dev/null
  perf record -F 4999 -g -p "$pid" -o "$data" 2>/dev/null & perf_pid=$!
  sleep 0.5
  echo "$(call "$calls" | head -1) ns per call under perf" >&2
  kill -INT "$perf_pid"; wait "$perf_pid" || true
else
  calls=${calls:-30000}
  read -r ms pid < <(bench/build/ready-client "$ADDR" "$NAME" -- "$bin/propbusd" --address "$ADDR" --in-memory)
  pids+=("$pid")
  busctl --address="$ADDR" call "$NAME" /org/propbus/PropBus1 org.propbus.PropBus1.Manager CreateProperty 'ssva{sv}' \
    bench.x i i 7 0 >/dev/null
  get() { bench/build/get-client "$ADDR" "$NAME" /org/propbus/PropBus1/bench org.propbus.PropBus1.Values x "$1"; }
  get 2000 >/dev/null
  perf record -F 4999 -g -p "$pid" -o "$data" 2>/dev/null & perf_pid=$!
  sleep 0.5
  echo "$(get "$calls") ns per Get under perf" >&2
  kill -INT "$perf_pid"; wait "$perf_pid" || true
fi
perf report -i "$data" --children --sort symbol --stdio -g none 2>/dev/null | grep -v '^#' | grep '%' | head -50 |
  sed -E 's/ +/ /g' | swift-demangle --simplified | cut -c1-160
echo "(perf data: $data)" >&2
