#!/usr/bin/env bash
# What linking costs a Swift process on this machine: a "hello" with the standard library only,
# with FoundationEssentials, and with full Foundation, each linked dynamically and with
# -static-stdlib, then `propctl --version` (start-up and argument parsing, no bus), each against
# `true` (a C program) in paired runs. Shows the floor a Foundation-free propctl could reach and
# the price of each library; see bench/README.md.
#
#   bench/link-cost.sh [--runs N]     (default 40)
#   env BIN   time $BIN/propctl instead of a release build's
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"

runs=40
while [ $# -gt 0 ]; do
  case $1 in
    --runs) runs=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "link-cost: unknown argument '$1' (try --help)" >&2; exit 64 ;;
  esac
done

bench_cc run-timer
bench_bin propctl
mkdir -p bench/build/hello bench/out
out="bench/out/link-cost-$(date -u +%Y%m%d-%H%M%S).txt"
{
  echo "link-cost $(date -u +%Y-%m-%dT%H:%M:%SZ), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), p50 of $runs paired runs"
  echo "propctl: $bin/propctl"
  printf '%-22s %10s %10s %10s %9s\n' program size_KiB p50_ms true_ms RSS_KiB
  measure() { # LABEL COMMAND...: size of COMMAND's file, p50 of it and of `true`, peak RSS
    local label=$1 took floor peak; shift
    { read -r took _; read -r floor _; } < <(bench/build/run-timer "$runs" -- "$@" -- true)
    peak=$(/usr/bin/time -f %M "$@" 2>&1 >/dev/null | tail -1)
    printf '%-22s %10s %10.2f %10.2f %9s\n' "$label" "$(du -k "$1" | cut -f1)" \
      "$(awk -v u="$took" 'BEGIN { print u / 1000 }')" "$(awk -v u="$floor" 'BEGIN { print u / 1000 }')" "$peak"
  }
  for lib in plain essentials foundation; do
    for link in dynamic static; do
      exe="bench/build/hello/$lib-$link"
      flags=(-O)
      [ "$link" = static ] && flags+=(-static-stdlib)
      swiftc "${flags[@]}" -o "$exe" "bench/ref/hello/$lib.swift" 2>/dev/null
      strip "$exe"
      measure "hello $lib-$link" "$exe"
    done
  done
  measure "propctl --version" "$bin/propctl" --version
} | tee "$out"
