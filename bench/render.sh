#!/usr/bin/env bash
# Render latency: a key changed (Properties.Set, reply awaited) → the rendered file holding the
# new value, beside the same key → file through `propctl bind --file`.
#
#   bench/render.sh [--changes N] [--dir DIR]
#
# Runs on a private bus with release builds of propbusd (in-memory store: no fsync of the
# store is measured, only the render's own) and propctl, the files in a temporary directory on
# the machine's disk (--dir DIR: in DIR instead, e.g. /dev/shm, where fsync costs nothing, to
# tell the render's own cost from the disk's). A small C libdbus client (bench/ref/render-latency.c) sets an int32 key N
# times and, after each Set's reply, waits with inotify until the file holds the new value. Rows:
#   render, wait 0             {{ bench.x }} staged (owner, mode, write, fsync), renamed, directory synced
#   render, wait 0, check      the same with "check": ["true", "{{file}}"]: one program started and reaped
#   propctl bind --file        the key written to a file by the client-side channel (no fsync)
# Goal: render p99 at most 50 ms.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"
changes=${CHANGES:-300}
dir=${TMPDIR:-/var/tmp}
while [ $# -gt 0 ]; do
  case $1 in
    --changes) changes=$2; shift 2 ;;
    --dir) dir=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "render: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
bench_cc render-latency
bench_bin propbusd propctl

bench_start_bus render
files=$(mktemp -d "$dir/propbus-render-files.XXXXXX")
trap 'bench_stop_all; rm -rf "$files"' EXIT
cat > "$tmp/model.json" <<JSON
{"groups": {"bench": {"properties": {"x": {"type": "i"}, "c": {"type": "i"}, "y": {"type": "i"}}}},
 "renders": {
   "plain": {"template_text": "{{ bench.x }}\n", "destination": "$files/plain.conf", "mode": "0644"},
   "checked": {"template_text": "{{ bench.c }}\n", "destination": "$files/checked.conf", "mode": "0644", "check": ["true", "{{file}}"]}
 }}
JSON
"$bin/propbusd" --address "$ADDR" --in-memory --model "$tmp/model.json" 2> "$tmp/propbusd.log" & pids+=($!)
bench_wait_started org.propbus.PropBus1 "${pids[-1]}" "$tmp/propbusd.log"
"$bin/propctl" --address "$ADDR" bind bench.y --file "$files/bound" & pids+=($!)
for _ in $(seq 100); do [ "$(cat "$files/bound" 2>/dev/null)" = 0 ] && [ -s "$files/plain.conf" ] && break; sleep 0.05; done

echo "key change → file content, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), files on $(df --output=fstype "$files" | tail -1)"
for row in "render, wait 0|x|plain.conf" "render, wait 0, check|c|checked.conf" "propctl bind --file|y|bound"; do
  IFS='|' read -r label key file <<<"$row"
  read -r p50 p99 max n < <(bench/build/render-latency "$ADDR" /org/propbus/PropBus1/bench "$key" "$files/$file" "$changes")
  printf '%-24s p50 %8.1f us   p99 %8.1f us   max %9.1f us   (%d changes)\n' "$label" "$p50" "$p99" "$max" "$n"
done
