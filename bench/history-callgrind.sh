#!/usr/bin/env bash
# History's cost as a count: the daemon's instructions per durable write under callgrind, with
# history on and with --no-history, from runs of different lengths (start-up, loading and exit
# cancel out). A count does not move with the machine's load.
#
#   bench/history-callgrind.sh [--writers W] [--keys K] [--history-rows N] [--writes "N1 N2"] [--pauses "P..."] [--modes "on off"] [--keep DIR]
#
#   --writers W       concurrent writers (default 1; 16 as durable-writes.sh's second case)
#   --keys K          other keys in the store besides the writers' (default 0)
#   --history-rows N  history rows pre-filled into the store (bench/history-fill.sh; default 0)
#   --writes "N1 N2"  writes per writer of the runs (default "200 1200")
#   --pauses "P..."   microseconds each writer waits on average after each reply, one set of
#                     runs per value (default "0" with 1 writer, "0 100000 400000" with more)
#   --modes "on off"  which to measure (default both)
#   --keep DIR        keep the callgrind outputs there (callgrind_annotate --inclusive=yes)
#   env PROPBUSD      the daemon (default: a release build)
#
# Each run starts the daemon under valgrind on a copy of the same prepared store, so the runs
# of a mode start alike. Each run also reports its commits (calls of the store's commit, one
# per round that wrote; from the callgrind output), fsyncs, and history's own instructions per
# write (HistoryRecorder.record and HistoryPruner.prune, inclusive: the rows and the index step; a count that
# does not depend on the commit sizes, but leaves out the larger WAL write of each commit).
#
# Equal work. With one writer every write is a commit of its own, in both modes, and the
# difference of the two runs divided by the writes is the figure. With more writers a commit
# carries what arrived while the last one ran, and under valgrind that varies from run to run
# (the same build committed 9,600 writes in 4,023 and in 2,771 commits), while a commit has a
# fixed cost (BEGIN, COMMIT, the WAL frames, the round: ~100k instructions) larger than the
# margin looked for. So the two modes are compared at the same commits per write: each mode's
# runs, at three pauses (a pause makes commits smaller, so the runs' commits per write differ
# by design, not only by chance; with two, or runs whose commits per write lie close together,
# the split between a and b below is poorly determined and the ratio moves by several
# points), are fitted by least squares to
#     instructions = c0 + a * writes + b * commits
# (c0 start-up and exit, a a write's own cost, b a commit's), and each mode's instructions per
# write a + b * k are printed at the same k: the commits per write of the unpaused
# --no-history runs (what the "off" daemon does at full speed), and of the unpaused "on" runs.
# The fit's residuals are printed: a model that does not fit says so. The plain ratio of each
# mode's unpaused runs (each at its own commit sizes) is printed too, for comparison.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"
writers=1 keys=0 history_rows=0 writes="200 1200" pauses= modes="on off" keep=
while [ $# -gt 0 ]; do
  case $1 in
    --writers) writers=$2; shift 2 ;;
    --keys) keys=$2; shift 2 ;;
    --history-rows) history_rows=$2; shift 2 ;;
    --writes) writes=$2; shift 2 ;;
    --pauses) pauses=$2; shift 2 ;;
    --modes) modes=$2; shift 2 ;;
    --keep) keep=$2; mkdir -p "$keep"; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "history-callgrind: unknown argument '$1' (try --help)" >&2; exit 64 ;;
  esac
done
command -v valgrind >/dev/null || bench_need valgrind
bench_cc write-client glib-2.0
if [ -n "${PROPBUSD:-}" ]; then propbusd=$PROPBUSD; else bench_bin propbusd; propbusd="$bin/propbusd"; fi
[ -n "$pauses" ] || { if [ "$writers" -gt 1 ]; then pauses="0 100000 400000"; else pauses=0; fi; }
bench_start_bus history-callgrind '<limit name="reply_timeout">600000</limit>'
export DBUS_SESSION_BUS_ADDRESS=$ADDR
unset DBUS_SYSTEM_BUS_ADDRESS DBUS_STARTER_ADDRESS DBUS_STARTER_BUS_TYPE STATE_DIRECTORY

args_of() { if [ "$1" = off ]; then echo --no-history; else echo --history-max-rows 100000000; fi; }

# The prepared store: the writers' keys and K others, then N history rows.
"$propbusd" --address "$ADDR" --state-dir "$tmp/prepared" --max-properties 200000 2>/dev/null & pb=$!; pids+=("$pb")
bench_wait_owner org.propbus.PropBus1
bench/build/write-client "$ADDR" preload-propbus "$keys"
bench_stop_pid "$pb"; bench_wait_gone org.propbus.PropBus1
[ "$history_rows" -gt 0 ] && bench/history-fill.sh "$tmp/prepared" "$history_rows" "$(( keys > 0 ? keys : 1000 ))"

# run MODE N PAUSE → "INSTRUCTIONS COMMITS FSYNCS HISTORY_OWN" of the daemon for a run of N writes per writer
run() {
  rm -rf "$tmp/state"; cp -a "$tmp/prepared" "$tmp/state"
  # shellcheck disable=SC2046
  valgrind --tool=callgrind --callgrind-out-file="$tmp/cg.out" "$propbusd" --address "$ADDR" --state-dir "$tmp/state" \
    --max-properties 200000 $(args_of "$1") 2>/dev/null & local vg=$!; pids+=("$vg")
  for _ in $(seq 1200); do bench_has_owner org.propbus.PropBus1 && break; sleep 0.1; done
  WRITE_CLIENT_PAUSE_US=$3 bench/build/write-client "$ADDR" propbus "$writers" 100000 "$2" >/dev/null
  kill -TERM "$vg"; wait "$vg" 2>/dev/null || true
  for _ in $(seq 100); do bench_has_owner org.propbus.PropBus1 || break; sleep 0.1; done
  [ -z "$keep" ] || cp "$tmp/cg.out" "$keep/cg-$1-$writers-$2-$3.out"
  # Names are compressed: "(id) name" the first time, "(id)" after; a "calls=" line follows
  # the cfn= line of the function it calls. The store's commit is SQLiteStore.commit(_:durability:).
  awk '
    /^(c?fn|cfn)=\(/ { id = substr($0, index($0, "(")); name = substr(id, index(id, ")") + 2); id = substr(id, 1, index(id, ")"))
                        if (name != "") names[id] = name }
    # The line after a calls= line is the call'"'"'s position and inclusive cost: history'"'"'s own
    # instructions are those of HistoryRecorder.record (the rows) and HistoryPruner.prune (the
    # index step); HistoryTable.record and .prune in a build from before they were split.
    own_next { own += $2; own_next = 0 }
    /^cfn=/ { callee = names[id] }
    /^calls=/ { split($1, c, "="); if (callee ~ /SQLiteStoreC6commit_10durability/) commits += c[2]
                else if (callee ~ /^(fsync|fdatasync)$/) fsyncs += c[2]
                else if (callee ~ /(HistoryTable|HistoryRecorder|HistoryPruner)C(6record_7options|5prune7options)/) own_next = 1 }
    /^summary:|^totals:/ { total = $2 }
    END { printf "%s %d %d %d\n", total, commits, fsyncs, own }' "$tmp/cg.out"
}

# fit FILE → "a b c0 rms" for lines "WRITES COMMITS INSTRUCTIONS" (least squares, centred);
# with commits a fixed share of writes in every run (one writer) b cannot be told from a: 0.
fit() {
  awk '{ w[NR] = $1; c[NR] = $2; y[NR] = $3; sw += $1; sc += $2; sy += $3 }
    END {
      n = NR; mw = sw / n; mc = sc / n; my = sy / n
      for (i = 1; i <= n; i++) { dw = w[i] - mw; dc = c[i] - mc; dy = y[i] - my
        ww += dw * dw; cc += dc * dc; wc += dw * dc; wy += dw * dy; cy += dc * dy }
      det = ww * cc - wc * wc
      if (n < 3 || det <= 1e-9 * ww * cc) { a = wy / ww; b = 0 } else { a = (wy * cc - cy * wc) / det; b = (cy * ww - wy * wc) / det }
      c0 = my - a * mw - b * mc
      for (i = 1; i <= n; i++) { r = y[i] - c0 - a * w[i] - b * c[i]; rr += r * r }
      printf "%.1f %.1f %.0f %.0f\n", a, b, c0, sqrt(rr / n)
    }' "$1"
}

declare -A a b plain k
for mode in $modes; do
  : >"$tmp/fit-$mode"
  for pause in $pauses; do
    first=
    for n in $writes; do
      read -r total commits fsyncs own < <(run "$mode" "$n" "$pause")
      w=$(( n * writers ))
      echo "$mode pause ${pause}us: $w writes, $commits commits ($(awk -v c="$commits" -v w="$w" 'BEGIN { printf "%.3f", c / w }') per write), $fsyncs fsyncs, $total instructions" \
        "(history's rows and index step: $(awk -v o="$own" -v w="$w" 'BEGIN { printf "%.0f", o / w }') per write)"
      echo "$w $commits $total" >>"$tmp/fit-$mode"
      if [ "$pause" = "$(set -- $pauses; echo "$1")" ]; then
        if [ -z "$first" ]; then first="$w $commits $total"; else
          read -r w1 c1 t1 <<<"$first"
          plain[$mode]=$(awk -v a="$t1" -v b="$total" -v n=$(( w - w1 )) 'BEGIN { printf "%.0f", (b - a) / n }')
          k[$mode]=$(awk -v a="$c1" -v b="$commits" -v n=$(( w - w1 )) 'BEGIN { printf "%.4f", (b - a) / n }')
        fi
      fi
    done
  done
  read -r a[$mode] b[$mode] c0 rms < <(fit "$tmp/fit-$mode")
  echo "$mode ${plain[$mode]} instructions/write unpaused, at ${k[$mode]} commits/write ($writers writers, $keys keys, $history_rows history rows)"
  echo "$mode fit: ${a[$mode]} per write + ${b[$mode]} per commit (+ $c0; residuals rms $rms instructions over $(wc -l <"$tmp/fit-$mode") runs)"
done
if [ -n "${plain[on]:-}" ] && [ -n "${plain[off]:-}" ]; then
  awk -v on="${plain[on]}" -v off="${plain[off]}" 'BEGIN { printf "on/off %.3f unpaused (each at its own commits per write)\n", on / off }'
  for at in off on; do
    awk -v ao="${a[on]}" -v bo="${b[on]}" -v af="${a[off]}" -v bf="${b[off]}" -v k="${k[$at]}" -v at="$at" \
      'BEGIN { on = ao + bo * k; off = af + bf * k
               printf "on/off %.3f at equal commits (%.4f per write, the unpaused %s runs'"'"'): %.0f / %.0f instructions/write\n", on / off, k, at, on, off }'
  done
fi
