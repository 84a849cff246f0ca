#!/usr/bin/env bash
# Transient writes: acknowledged Sets of persistent=false keys per second, and fsync/fdatasync
# calls per Set (transient means memory, so there should be none).
#
#   bench/transient-writes.sh [--seconds S]
#   env PROPBUSD  use this propbusd binary instead of building one in release mode
#                 (e.g. an older build, for a before/after comparison); env BIN: $BIN/propbusd
#
# Starts a private dbus-daemon and `propbusd --state-dir <fresh dir on disk>`, creates
# bench.w0…w15 as transient properties, then runs 1 writer and 16 concurrent writers (one
# connection each, every Set waiting for its reply) for --seconds each, each run twice: once
# untimed by strace for the rate, once under `strace -c -f -e trace=fsync,fdatasync` for the
# fsync count. Prints a table.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"

seconds=${SECONDS_PER_RUN:-3}
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "transient-writes: unknown argument '$1' (try --help)" >&2; exit 64 ;;
  esac
done

scripts/setup
need=()
command -v gcc >/dev/null || need+=(gcc libc6-dev)
command -v strace >/dev/null || need+=(strace)
pkg-config --exists glib-2.0 || need+=(libglib2.0-dev)
bench_need "${need[@]}"
bench_cc write-client glib-2.0
client=bench/build/write-client
if [ -n "${PROPBUSD:-}" ]; then
  propbusd=$PROPBUSD
else
  bench_bin propbusd
  propbusd="$bin/propbusd"
fi

bench_start_bus transient '<limit name="reply_timeout">600000</limit>'
unset STATE_DIRECTORY
"$propbusd" --address "$ADDR" --state-dir "$tmp/state" 2>"$tmp/propbusd.log" & pb=$!
pids+=("$pb")
bench_wait_owner org.propbus.PropBus1 || exit 1
"$client" "$ADDR" preload-propbus-transient

# run WRITERS → "RATE FSYNCS_PER_SET"
run() {
  local out rate calls writes
  out=$("$client" "$ADDR" propbus "$1" "$seconds")
  rate=$(awk '{ printf "%.0f", $3 }' <<<"$out")
  strace -c -f -e trace=fsync,fdatasync -o "$tmp/strace.out" -p "$pb" 2>/dev/null &
  local strace_pid=$!
  sleep 0.5
  out=$("$client" "$ADDR" propbus "$1" "$seconds")
  kill -INT "$strace_pid"; wait "$strace_pid" 2>/dev/null || true
  writes=$(awk '{ print $1 }' <<<"$out")
  calls=$(awk '$NF == "fsync" || $NF == "fdatasync" { n += $4 } END { print n + 0 }' "$tmp/strace.out")
  echo "$rate $(awk -v c="$calls" -v w="$writes" 'BEGIN { printf "%.4f", (w > 0 ? c / w : 0) }')"
}

read -r r1 f1 < <(run 1)
read -r r16 f16 < <(run 16)
printf '%-22s %10s %10s\n' "transient Sets" "1 writer" "16 writers"
printf '%-22s %10s %10s\n' "Sets/s" "$r1" "$r16"
printf '%-22s %10s %10s\n' "fsync+fdatasync / Set" "$f1" "$f16"
echo "propbusd: $propbusd"
