#!/usr/bin/env bash
# What linking costs propctl and an idle propbusd: for each build directory (default: the release
# build), the size and shared libraries of both binaries, the idle daemon's VmRSS, and the wall
# time of `propctl get KEY` against `dbus-send --print-reply … Get` on the same daemon, paired
# and alternating (p50 of N runs). Compare two builds side by side, e.g. before and after a change:
#
#   bench/cli-startup.sh [--runs N] [DIR...]     (default 200 runs; DIR holds propctl and propbusd)
#
# bench/all.sh measures the same `propctl get` row with a C timer; this script is the quick one.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"

runs=200 dirs=()
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    -*) echo "cli-startup: unknown argument '$1' (try --help)" >&2; exit 64 ;;
    *) dirs+=("$1"); shift ;;
  esac
done
if [ ${#dirs[@]} -eq 0 ]; then
  swift build -c release --product propctl >&2
  swift build -c release --product propbusd >&2
  dirs=("$(swift build -c release --show-bin-path)")
fi

p50() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

mkdir -p bench/out
out="bench/out/cli-startup-$(date -u +%Y%m%d-%H%M%S).txt"
bench_start_bus cli
exec > >(tee "$out")
echo "cli-startup $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), p50 of $runs paired runs"
for dir in "${dirs[@]}"; do
  echo "== $dir"
  for program in propctl propbusd; do
    libraries=$(ldd "$dir/$program" | awk '{ print $1 }' | grep -E '^lib(Foundation|_FoundationICU|icu)' | tr '\n' ' ' || true)
    printf '%-9s %6d KiB  %2d shared libraries  Foundation/ICU: %s\n' "$program" "$(( $(stat -c %s "$dir/$program") / 1024 ))" \
      "$(ldd "$dir/$program" | wc -l)" "${libraries:-none}"
  done
  STATE_DIRECTORY="$tmp/state" "$dir/propbusd" --address "$ADDR" --in-memory >"$tmp/daemon.log" 2>&1 &
  daemon=$!; pids+=("$daemon")
  bench_wait_owner org.propbus.PropBus1
  sleep 1   # idle: start-up allocations settled
  echo "propbusd idle VmRSS: $(awk '/^VmRSS/ { print $2, $3 }' "/proc/$daemon/status")"
  busctl --address="$ADDR" call org.propbus.PropBus1 /org/propbus/PropBus1 \
    org.propbus.PropBus1.Manager CreateProperty 'ssva{sv}' bench.x i i 7 0 >/dev/null
  [ "$("$dir/propctl" --address "$ADDR" get bench.x)" = 7 ] || { echo "cli-startup: propctl get bench.x is not 7" >&2; exit 1; }
  : >"$tmp/propctl" ; : >"$tmp/dbus-send"
  for i in $(seq "$runs"); do
    order=(propctl dbus-send)
    [ $((i % 2)) -eq 0 ] && order=(dbus-send propctl)   # alternate, so drift hits both alike
    for tool in "${order[@]}"; do
      start=${EPOCHREALTIME/./}   # microseconds, read without forking
      if [ "$tool" = propctl ]; then
        "$dir/propctl" --address "$ADDR" get bench.x >/dev/null
      else
        dbus-send --bus="$ADDR" --print-reply --dest=org.propbus.PropBus1 /org/propbus/PropBus1/bench \
          org.freedesktop.DBus.Properties.Get string:org.propbus.PropBus1.Values string:x >/dev/null
      fi
      end=${EPOCHREALTIME/./}
      echo $(( end - start )) >>"$tmp/$tool"
    done
  done
  pc=$(p50 <"$tmp/propctl") ds=$(p50 <"$tmp/dbus-send")
  awk -v pc="$pc" -v ds="$ds" 'BEGIN { printf "propctl get p50 %.2f ms, dbus-send Get p50 %.2f ms, ratio %.2f\n", pc / 1000, ds / 1000, pc / ds }'
  kill "$daemon"; wait "$daemon" || true
done
