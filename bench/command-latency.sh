#!/usr/bin/env bash
# Command execution latency: Command.Execute of an exec command (and of a handler command
# served by `propctl serve`) until its reply, against spawning the same program directly; then
# `echo hi` behind N running `sleep`s against `echo hi` alone (one poll loop serves them all,
# so the ratio should stay near 1).
#
#   bench/command-latency.sh [--calls N] [--sleeps "8 60"]
#
# Runs on a private bus with a release propbusd (in-memory store). The program is /bin/cat, so
# the input really goes through stdin and comes back on stdout. Prints p50/p99/max in
# microseconds and the ratio of the p50s to the direct spawn. See bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"
calls=${CALLS:-500}
sleeps=${SLEEPS:-"8 60"}
while [ $# -gt 0 ]; do
  case $1 in
    --calls) calls=$2; shift 2 ;;
    --sleeps) sleeps=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "command-latency: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
scripts/setup
bench_cc exec-latency
bench_bin propbusd propctl

bench_start_bus commands
"$bin/propbusd" --address "$ADDR" --in-memory & pids+=($!)
bench_wait_owner org.propbus.PropBus1
call=(busctl --address="$ADDR" call org.propbus.PropBus1 /org/propbus/PropBus1 org.propbus.PropBus1.Manager)
"${call[@]}" CreateCommand 'sa{sv}' bench.cat 1 exec as 1 /bin/cat >/dev/null
"${call[@]}" CreateCommand 'sa{sv}' bench.served 1 handler b true >/dev/null
"$bin/propctl" --address "$ADDR" serve bench.served -- /bin/cat 2>/dev/null & pids+=($!)
for _ in $(seq 100); do
  busctl --address="$ADDR" get-property org.propbus.PropBus1 /org/propbus/PropBus1/bench/served org.propbus.PropBus1.Command Enabled | grep -q true && break
  sleep 0.05
done

echo "Execute(/bin/cat) until the reply, $calls calls each, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
read -r rp50 rp99 rmax rn < <(bench/build/exec-latency spawn /bin/cat "$calls")
printf '%-28s p50 %8.1f us   p99 %8.1f us   max %8.1f us\n' "spawn /bin/cat (reference)" "$rp50" "$rp99" "$rmax"
for label in "exec command:bench/cat" "handler (propctl serve):bench/served"; do
  read -r p50 p99 max n < <(bench/build/exec-latency execute "$ADDR" "/org/propbus/PropBus1/${label#*:}" "$calls")
  printf '%-28s p50 %8.1f us   p99 %8.1f us   max %8.1f us   %.2fx the reference p50\n' "${label%%:*}" "$p50" "$p99" "$max" "$(awk -v a="$p50" -v b="$rp50" 'BEGIN { print a / b }')"
done

# echo behind N running sleeps: each N is started in addition to the ones before, so the last N
# is the most running at once (below --max-executions, 64). The first echo right after the
# sleeps started is the one a thread-per-execution runner makes wait (its pool grows about a
# thread a second), so it is timed alone, with busctl, against echo alone timed the same way;
# then the p50 of many.
"${call[@]}" CreateCommand 'sa{sv}' bench.echo 1 exec as 2 echo hi >/dev/null
"${call[@]}" CreateCommand 'sa{sv}' bench.sleep 2 exec as 2 sleep 600 concurrent b true >/dev/null
echo_once() {
  local start end
  start=$(date +%s%N)
  busctl --address="$ADDR" --timeout=120 call org.propbus.PropBus1 /org/propbus/PropBus1/bench/echo org.propbus.PropBus1.Command Execute v s "" >/dev/null
  end=$(date +%s%N)
  echo $(( (end - start) / 1000 ))
}
alone=$(bench_median "$(echo_once)" "$(echo_once)" "$(echo_once)")
read -r ap50 ap99 amax an < <(bench/build/exec-latency execute "$ADDR" /org/propbus/PropBus1/bench/echo "$calls")
printf '%-28s first %10.1f us (busctl, median of 3)   p50 %8.1f us   p99 %8.1f us\n' "echo alone" "$alone" "$ap50" "$ap99"
started=0
for n in $sleeps; do
  while [ "$started" -lt "$n" ]; do
    busctl --address="$ADDR" call org.propbus.PropBus1 /org/propbus/PropBus1/bench/sleep org.propbus.PropBus1.Command Start v s "" >/dev/null
    started=$((started + 1))
  done
  first=$(echo_once)
  read -r p50 p99 max n_ < <(bench/build/exec-latency execute "$ADDR" /org/propbus/PropBus1/bench/echo "$calls")
  running=$(busctl --address="$ADDR" get-property org.propbus.PropBus1 /org/propbus/PropBus1/bench/sleep org.propbus.PropBus1.Command Executions)
  printf '%-28s first %10.1f us (%.2fx alone)   p50 %8.1f us (%.2fx alone)   p99 %8.1f us   (%s running after)\n' "echo behind $n sleeps" \
    "$first" "$(awk -v a="$first" -v b="$alone" 'BEGIN { print a / b }')" "$p50" "$(awk -v a="$p50" -v b="$ap50" 'BEGIN { print a / b }')" "$p99" "${running#u }"
done
