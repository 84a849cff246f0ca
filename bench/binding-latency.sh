#!/usr/bin/env bash
# Daemon-side binding latency: Set on one key → PropertiesChanged of the key bound to it.
#
#   bench/binding-latency.sh [--calls N]
#
# Runs on a private bus with a release propbusd (in-memory store, so no fsync is measured, and
# again with the SQLite store). Prints p50/p99/max in microseconds. See bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"
calls=${CALLS:-2000}
while [ $# -gt 0 ]; do
  case $1 in
    --calls) calls=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "binding-latency: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
scripts/setup
bench_cc bind-latency
bench_bin propbusd

bench_start_bus binding

run() { # LABEL PROPBUSD-ARGS...
  local label=$1; shift
  "$bin/propbusd" --address "$ADDR" "$@" & local pid=$!
  bench_wait_owner org.propbus.PropBus1
  local call=(busctl --address="$ADDR" call org.propbus.PropBus1 /org/propbus/PropBus1 org.propbus.PropBus1.Manager)
  "${call[@]}" CreateProperty 'ssva{sv}' bench.a i i 0 0 >/dev/null
  "${call[@]}" CreateProperty 'ssva{sv}' bench.b i i 0 0 >/dev/null
  "${call[@]}" Bind 'ssa{sv}' bench.b bench.a 1 persistent b true >/dev/null
  read -r p50 p99 max n < <(bench/build/bind-latency "$ADDR" /org/propbus/PropBus1/bench a /org/propbus/PropBus1/bench b "$calls")
  printf '%-22s p50 %7.1f us   p99 %7.1f us   max %8.1f us   (%d sets)\n' "$label" "$p50" "$p99" "$max" "$n"
  kill "$pid"; wait "$pid" 2>/dev/null || true
}
echo "Set bench.a → PropertiesChanged(bench.b), identity binding, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
run "in-memory store" --in-memory
run "SQLite store" --state-dir "$tmp/state"
