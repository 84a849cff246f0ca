#!/usr/bin/env bash
# Properties.Get round trip: propbusd vs a minimal C libdbus service, on one private bus.
#
#   bench/get-roundtrip.sh [--rounds N] [--calls N] [--window N] [--self]
#
#   --rounds N   rounds, each timing both services (default 5, env ROUNDS)
#   --calls N    Get calls per service per round (default 20000, env CALLS)
#   --window N   pipeline the calls, N in flight (default 1: synchronous, one at a time)
#   --self       compare the reference with a second reference instance instead of propbusd
#                (checks the harness; the ratios should be ~1.00)
#   env BIN      measure $BIN/propbusd instead of building one in release mode
#
# Prints a table (also saved under bench/out/). See bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"

rounds=${ROUNDS:-5} calls=${CALLS:-20000} window=1 self=0
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --calls) calls=$2; shift 2 ;;
    --window) window=$2; shift 2 ;;
    --self) self=1; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "get-roundtrip: unknown argument '$1' (try --help)" >&2; exit 64 ;;
  esac
done

OBJ=/org/propbus/PropBus1/bench IFACE=org.propbus.PropBus1.Values

# --- build ---------------------------------------------------------------------------
scripts/setup
mkdir -p bench/out
bench_cc ref-service sqlite3
bench_cc get-client
if [ "$self" -eq 0 ]; then
  bench_bin propbusd
  propbusd="$bin/propbusd"
fi

# --- private bus and services ----------------------------------------------------------
bench_start_bus bench

bench/build/ref-service "$ADDR" org.propbus.Ref1 >"$tmp/ref.log" 2>&1 &
ref_pid=$!; pids+=("$ref_pid")
bench_wait_started org.propbus.Ref1 "$ref_pid" "$tmp/ref.log"

if [ "$self" -eq 1 ]; then
  subject=ref2 subject_name=org.propbus.Ref2
  bench/build/ref-service "$ADDR" "$subject_name" >"$tmp/subject.log" 2>&1 &
  subj_pid=$!; pids+=("$subj_pid")
  bench_wait_started "$subject_name" "$subj_pid" "$tmp/subject.log"
else
  subject=propbusd subject_name=org.propbus.PropBus1
  # Own state dir, so the machine's real store is never touched.
  STATE_DIRECTORY="$tmp/state" XDG_STATE_HOME="$tmp/xdg-state" "$propbusd" --address "$ADDR" \
    >"$tmp/subject.log" 2>&1 &
  subj_pid=$!; pids+=("$subj_pid")
  bench_wait_started "$subject_name" "$subj_pid" "$tmp/subject.log"
  busctl --address="$ADDR" call org.propbus.PropBus1 /org/propbus/PropBus1 \
    org.propbus.PropBus1.Manager CreateProperty 'ssva{sv}' bench.x i i 7 0
fi
for name in org.propbus.Ref1 "$subject_name"; do
  got=$(busctl --address="$ADDR" get-property "$name" "$OBJ" "$IFACE" x)
  [ "$got" = "i 7" ] || { echo "get-roundtrip: $name $OBJ x = '$got', expected 'i 7'" >&2; exit 1; }
done

# --- measure ---------------------------------------------------------------------------
hz=$(getconf CLK_TCK)
cpu_ticks() { # utime+stime of all threads of PID (fields 14, 15; comm may contain spaces)
  local stat rest
  read -r stat < "/proc/$1/stat"
  rest=${stat##*) }
  set -- $rest
  echo $(( ${12} + ${13} ))
}
switches() { # voluntary context switches of all threads of PID: each time one of them waited
  local total=0 task
  for task in /proc/"$1"/task/*; do total=$(( total + $(awk '/^voluntary_ctxt_switches/ { print $2 }' "$task/status") )); done
  echo "$total"
}
run_one() { # NAME PID -> "ns_per_call cpu_ns_per_call switches_per_1000_calls"
  local before after ns cs_before cs_after
  before=$(cpu_ticks "$2"); cs_before=$(switches "$2")
  ns=$(bench/build/get-client "$ADDR" "$1" "$OBJ" "$IFACE" x "$calls" 1000 "$window")
  after=$(cpu_ticks "$2"); cs_after=$(switches "$2")
  echo "$ns $(( (after - before) * 1000000000 / hz / calls )) $(( (cs_after - cs_before) * 1000 / (calls + 1000) ))"
}

results=()  # "ref_ns ref_cpu ref_cs subj_ns subj_cpu subj_cs" per round
for r in $(seq "$rounds"); do
  if [ $((r % 2)) -eq 1 ]; then   # alternate the order so drift hits both sides alike
    ref=$(run_one org.propbus.Ref1 "$ref_pid"); subj=$(run_one "$subject_name" "$subj_pid")
  else
    subj=$(run_one "$subject_name" "$subj_pid"); ref=$(run_one org.propbus.Ref1 "$ref_pid")
  fi
  results+=("$ref $subj")
  echo "round $r/$rounds done" >&2
done

# --- report ----------------------------------------------------------------------------
out="bench/out/get-roundtrip-$(date +%Y%m%d-%H%M%S)-w$window.txt"
printf '%s\n' "${results[@]}" | awk -v subj="$subject" -v calls="$calls" -v window="$window" \
  -v threads_ref="$(ls /proc/"$ref_pid"/task | wc -l)" -v threads_subj="$(ls /proc/"$subj_pid"/task | wc -l)" \
  -v rev="$(git rev-parse --short HEAD 2>/dev/null || echo '?')" \
  -v cpus="$(nproc)" -v load="$(cut -d' ' -f1-3 /proc/loadavg)" '
  function median(a, n,   i, j, t) {
    for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j > 0 && a[j] > t; j--) a[j+1] = a[j]; a[j+1] = t }
    return n % 2 ? a[(n+1)/2] : (a[n/2] + a[n/2+1]) / 2
  }
  {
    n++; rn[n] = $1; rc[n] = $2; rs[n] = $3; sn[n] = $4; sc[n] = $5; ss[n] = $6
    wr[n] = $4 / $1; cr[n] = ($2 > 0) ? $5 / $2 : 0
  }
  END {
    printf "Properties.Get round trip, %d calls/round, window %d, git %s, %d CPUs, load %s\n", calls, window, rev, cpus, load
    printf "wall = client-side us per call (%s); cpu = service utime+stime us per call;\n", (window > 1 ? "pipelined" : "synchronous")
    printf "cs = the service'"'"'s voluntary context switches per call (all threads, warm-up calls included)\n\n"
    printf "%-6s %10s %13s %7s   %9s %12s %7s   %6s %11s\n", "round", "ref wall", subj " wall", "ratio", "ref cpu", subj " cpu", "ratio", "ref cs", subj " cs"
    for (i = 1; i <= n; i++) {
      printf "%-6d %10.1f %13.1f %7.2f   %9.1f %12.1f %7.2f   %6.2f %11.2f\n", i, rn[i]/1000, sn[i]/1000, wr[i], rc[i]/1000, sc[i]/1000, cr[i], rs[i]/1000, ss[i]/1000
      a1[i] = rn[i]; a2[i] = sn[i]; a3[i] = wr[i]; a4[i] = rc[i]; a5[i] = sc[i]; a6[i] = cr[i]; a7[i] = rs[i]; a8[i] = ss[i]
    }
    printf "%-6s %10.1f %13.1f %7.2f   %9.1f %12.1f %7.2f   %6.2f %11.2f\n", "median", median(a1, n)/1000, median(a2, n)/1000,
      median(a3, n), median(a4, n)/1000, median(a5, n)/1000, median(a6, n), median(a7, n)/1000, median(a8, n)/1000
    printf "threads: ref %d, %s %d\n", threads_ref, subj, threads_subj
  }' | tee "$out"
echo "(saved to $out)" >&2
