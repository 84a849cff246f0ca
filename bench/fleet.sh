#!/usr/bin/env bash
# Fleet keys (issue 14): two hosts through one etcd, next to etcd's own latencies.
#
#   bench/fleet.sh [--quick] [--in-memory] [--calls N] [--rounds R]
#
#   --quick      fewer calls and one round (a smoke run, not figures)
#   --in-memory  hosts keep their mirror in memory (no fsync of their own): what the fleet
#                path costs without the store's commit
#   --calls N    calls per measurement (default 500)
#   --rounds R   rounds of the eight measurements, interleaved (default 3); each row is the
#                median over rounds of that round's p50 and p99
#   env BIN      a directory holding a prebuilt propbusd, instead of a release build
#
# One etcd member on loopback (temp data dir, fsync on as always), two private buses, and on each
# a release propbusd --fleet etcd://…/bench --fleet-host a|b (SQLite store unless --in-memory):
# hosts A and B. Next to them, on two more private buses and the same etcd (prefix /floor/), two
# bench/ref/fleet-floor.c hosts: the floor, the least a host can do (libdbus + libcurl, one poll
# loop, no store, no model) for the same Set and the same watch event.
# Rows, each against its reference measured in the same run:
#   Set on A → PropertiesChanged on B (bench/ref/fleet-latency.c, libdbus), propbusd and floor
#       vs etcd's put → watch event (bench/ref/etcd-latency.c, libcurl as propbusd uses it)
#       goal: <= 1.5x; and propbus / floor
#   etcd alone in the fleet's shape: propbusd's txn → the event on the second of two watches
#       (bench/ref/etcd-latency.c fleetwatch): hosts and buses that cost nothing, vs put → watch
#   fleet Set round trip on A (the txn, the mirror's commit, the reply), propbusd and floor
#       vs a raw etcd txn comparing mod_revision and putting the key (the least one Set needs),
#       and vs the txn propbusd sends for one Set (2 compares, a put, 2 gets on failure)
#   throughput: fleet Sets/s on A from 1 and from 8 writers (each on its own connection and key,
#       each Set waiting for its reply; bench/ref/fleet-latency.c throughput) vs raw etcd txns/s
#       of propbusd's shape from 1 and 8 clients (each its own handle and key; etcd-latency
#       txnrate), goal for 8: >= 0.5x
# Then the CPU per call of every process in each measurement (/proc/PID/stat utime+stime
# before and after, the client's from its rusage), summed over rounds: on 2 cores, CPU is what
# sets the latency. Prints the tables (also saved under bench/out/). See bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"

calls=500 rounds=3 store=sqlite
while [ $# -gt 0 ]; do
  case $1 in
    --quick) calls=100 rounds=1; shift ;;
    --in-memory) store=memory; shift ;;
    --calls) calls=$2; shift 2 ;;
    --rounds) rounds=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "fleet: unknown argument '$1' (try --help)" >&2; exit 64 ;;
  esac
done

scripts/setup
bench_cc fleet-latency
bench_cc etcd-latency libcurl
bench_cc fleet-floor libcurl
bench_bin propbusd
mkdir -p bench/out

# Bus A (bench_start_bus also sets $tmp and the EXIT trap that stops everything in $pids).
bench_start_bus fleet
ADDR_A=$ADDR bus_a=${pids[-1]}
start_bus() { # NAME: another bus like A's; sets $address and $bus_pid
  sed "s|unix:path=$tmp/bus|unix:path=$tmp/bus-$1|" "$tmp/bus.conf" > "$tmp/bus-$1.conf"
  { read -r address; read -r bus_pid; } < <(dbus-daemon --config-file="$tmp/bus-$1.conf" --fork --print-address=1 --print-pid=1)
  pids+=("$bus_pid")
}
start_bus b; ADDR_B=$address bus_b=$bus_pid
# The floor's hosts own org.propbus.PropBus1 too (fleet-latency calls that name), so they need
# buses of their own.
start_bus floor-a; ADDR_FA=$address bus_fa=$bus_pid
start_bus floor-b; ADDR_FB=$address bus_fb=$bus_pid
export XDG_CONFIG_HOME="$tmp/config" XDG_STATE_HOME="$tmp/state"
unset DBUS_SESSION_BUS_ADDRESS DBUS_SYSTEM_BUS_ADDRESS DBUS_STARTER_ADDRESS DBUS_STARTER_BUS_TYPE STATE_DIRECTORY

# etcd: one member, free loopback ports, fast elections, as the tests start it.
read -r client_port peer_port < <(/usr/bin/python3 -c '
import socket
s = [socket.socket() for _ in range(2)]
for x in s: x.bind(("127.0.0.1", 0))
print(*[x.getsockname()[1] for x in s])')
ETCD=http://127.0.0.1:$client_port
etcd --name bench --data-dir "$tmp/etcd" \
  --listen-client-urls "$ETCD" --advertise-client-urls "$ETCD" \
  --listen-peer-urls "http://127.0.0.1:$peer_port" --initial-advertise-peer-urls "http://127.0.0.1:$peer_port" \
  --initial-cluster "bench=http://127.0.0.1:$peer_port" --election-timeout 500 --heartbeat-interval 50 \
  --log-level warn --logger zap > "$tmp/etcd.log" 2>&1 &
pids+=("$!") etcd_pid=$!
for _ in $(seq 200); do
  ETCDCTL_API=3 etcdctl --endpoints "$ETCD" get probe >/dev/null 2>&1 && break
  sleep 0.05
done
ETCDCTL_API=3 etcdctl --endpoints "$ETCD" get probe >/dev/null || { echo "fleet: etcd did not start:" >&2; cat "$tmp/etcd.log" >&2; exit 1; }

NAME=org.propbus.PropBus1 ROOT=/org/propbus/PropBus1
start_host() { # LETTER ADDRESS
  local store_option=(--state-dir "$tmp/state-$1")
  [ "$store" = sqlite ] || store_option=(--in-memory)
  ADDR=$2 "$bin/propbusd" --address "$2" "${store_option[@]}" \
    --fleet "etcd://127.0.0.1:$client_port/bench" --fleet-host "$1" 2> "$tmp/propbusd-$1.log" &
  pids+=("$!") host_pid=$!
  ADDR=$2 bench_wait_owner "$NAME"
}
start_floor() { # LETTER ADDRESS: a fleet-floor host (it owns the name once its watch is created)
  bench/build/fleet-floor "$2" "$ETCD" /floor/ bench.x 2> "$tmp/floor-$1.log" &
  pids+=("$!") host_pid=$!
  ADDR=$2 bench_wait_owner "$NAME" || { cat "$tmp/floor-$1.log" >&2; exit 1; }
}
fleet_state() { # ADDRESS
  busctl --address="$1" get-property "$NAME" "$ROOT" org.propbus.PropBus1.Manager FleetState 2>/dev/null | cut -d'"' -f2
}
start_host a "$ADDR_A"; host_a=$host_pid
start_host b "$ADDR_B"; host_b=$host_pid
start_floor a "$ADDR_FA"; floor_a=$host_pid
start_floor b "$ADDR_FB"; floor_b=$host_pid
for address in "$ADDR_A" "$ADDR_B"; do
  for _ in $(seq 200); do [ "$(fleet_state "$address")" = connected ] && break; sleep 0.05; done
  [ "$(fleet_state "$address")" = connected ] || { echo "fleet: a host is not connected to etcd:" >&2; cat "$tmp"/propbusd-*.log >&2; exit 1; }
done
busctl --address="$ADDR_A" call "$NAME" "$ROOT" org.propbus.PropBus1.Manager CreateProperty 'ssva{sv}' \
  bench.x i i 0 1 scope s fleet >/dev/null
# The throughput rows' keys: one per writer.
writers=8
for i in $(seq 0 $((writers - 1))); do
  busctl --address="$ADDR_A" call "$NAME" "$ROOT" org.propbus.PropBus1.Manager CreateProperty 'ssva{sv}' \
    "bench.w$i" i i 0 1 scope s fleet >/dev/null
done
for _ in $(seq 200); do
  busctl --address="$ADDR_B" get-property "$NAME" "$ROOT/bench" org.propbus.PropBus1.Values x >/dev/null 2>&1 \
    && busctl --address="$ADDR_B" get-property "$NAME" "$ROOT/bench" org.propbus.PropBus1.Values "w$((writers - 1))" >/dev/null 2>&1 && break
  sleep 0.05
done

# CPU accounting: the processes, and per measurement the ticks each used, summed over rounds.
cpu_names=(etcd "propbusd A" "propbusd B" "bus A" "bus B" "floor A" "floor B" "floor bus A" "floor bus B")
cpu_pids=("$etcd_pid" "$host_a" "$host_b" "$bus_a" "$bus_b" "$floor_a" "$floor_b" "$bus_fa" "$bus_fb")
declare -A cpu_ticks=() client_us=() wall_us=()
measurements=()
ticks() { # PID: utime + stime, in clock ticks (all threads)
  local stat
  stat=$(< "/proc/$1/stat") || { echo 0; return; }
  stat=${stat##*) }  # comm may hold spaces; the fields after it are from state (field 3) on
  set -- $stat
  echo $(( ${12} + ${13} ))
}
# Runs one measurement (NAME CMD…): sets $p50 $p99 and adds to NAME's CPU and wall time.
measure() {
  local name=$1 i before=() start end user system
  shift
  [ -n "${wall_us[$name]:-}" ] || measurements+=("$name")
  for i in "${!cpu_pids[@]}"; do before[i]=$(ticks "${cpu_pids[i]}"); done
  start=$(date +%s%N)
  # A subshell, so that `times` there gives the client's own CPU (its children's line).
  ( "$@" > "$tmp/measure"; times > "$tmp/times" )
  end=$(date +%s%N)
  for i in "${!cpu_pids[@]}"; do
    cpu_ticks[$name,$i]=$(( ${cpu_ticks[$name,$i]:-0} + $(ticks "${cpu_pids[i]}") - before[i] ))
  done
  read -r user system < <(sed -n 2p "$tmp/times")
  client_us[$name]=$(awk -v c="${client_us[$name]:-0}" -v u="$user" -v s="$system" 'function us(t, m) {
      split(t, m, "m"); sub(/s$/, "", m[2]); return (m[1] * 60 + m[2]) * 1e6 } BEGIN { printf "%.0f", c + us(u) + us(s) }')
  wall_us[$name]=$(( ${wall_us[$name]:-0} + (end - start) / 1000 ))
  read -r p50 p99 _ < "$tmp/measure"
}

# A throughput measurement (CMD…, printing "rate p50 p99 n"): sets $rate and $rate_p50.
measure_rate() {
  "$@" > "$tmp/measure-rate"
  read -r rate rate_p50 _ < "$tmp/measure-rate"
}

# Interleaved rounds; each measurement prints "p50 p99 max n" in microseconds.
rate1=() rate8=() rate8p50=() erate1=() erate8=() erate8p50=()
prop50=() prop99=() floor50=() floor99=() watch50=() watch99=() fwatch50=() fwatch99=() set50=() set99=() fset50=() fset99=()
txn50=() txn99=() ftxn50=() ftxn99=()
for round in $(seq "$rounds"); do
  measure "Set A → PropertiesChanged B, propbusd" bench/build/fleet-latency propagate "$ADDR_A" "$ADDR_B" "$ROOT/bench" x "$calls"
  prop50+=("$p50") prop99+=("$p99")
  measure "Set A → PropertiesChanged B, floor" bench/build/fleet-latency propagate "$ADDR_FA" "$ADDR_FB" "$ROOT/bench" x "$calls"
  floor50+=("$p50") floor99+=("$p99")
  measure "etcd put → watch" bench/build/etcd-latency watch "$ETCD" /ref/watch "$calls"
  watch50+=("$p50") watch99+=("$p99")
  measure "etcd txn → 2nd of two watches" bench/build/etcd-latency fleetwatch "$ETCD" /ref/fleetwatch "$calls"
  fwatch50+=("$p50") fwatch99+=("$p99")
  measure "Set round trip on A, propbusd" bench/build/fleet-latency roundtrip "$ADDR_A" "$ROOT/bench" x "$calls"
  set50+=("$p50") set99+=("$p99")
  measure "Set round trip on A, floor" bench/build/fleet-latency roundtrip "$ADDR_FA" "$ROOT/bench" x "$calls"
  fset50+=("$p50") fset99+=("$p99")
  measure "etcd txn (compare + put)" bench/build/etcd-latency txn "$ETCD" /ref/txn "$calls"
  txn50+=("$p50") txn99+=("$p99")
  measure "etcd txn, propbusd's shape" bench/build/etcd-latency fleettxn "$ETCD" /ref/fleettxn "$calls"
  ftxn50+=("$p50") ftxn99+=("$p99")
  # Throughput: "rate p50 p99 n"; the same number of calls per writer as the latency rows, 8
  # writers, so each row runs a few seconds.
  measure_rate bench/build/fleet-latency throughput "$ADDR_A" "$ROOT/bench" w 1 "$calls"; rate1+=("$rate")
  measure_rate bench/build/fleet-latency throughput "$ADDR_A" "$ROOT/bench" w "$writers" "$calls"; rate8+=("$rate") rate8p50+=("$rate_p50")
  measure_rate bench/build/etcd-latency txnrate "$ETCD" /ref/rate 1 "$calls"; erate1+=("$rate")
  measure_rate bench/build/etcd-latency txnrate "$ETCD" /ref/rate "$writers" "$calls"; erate8+=("$rate") erate8p50+=("$rate_p50")
  echo "fleet: round $round of $rounds done" >&2
done

ms() { awk -v us="$1" 'BEGIN { printf "%.2f", us / 1000 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
met() { awk -v v="$1" -v g="$2" 'BEGIN { print (v <= g ? "yes" : "NO") }'; }
m() { bench_median "$@"; }
pp50=$(m "${prop50[@]}") pp99=$(m "${prop99[@]}") wp50=$(m "${watch50[@]}") wp99=$(m "${watch99[@]}")
sp50=$(m "${set50[@]}") sp99=$(m "${set99[@]}") tp50=$(m "${txn50[@]}") tp99=$(m "${txn99[@]}")
fp50=$(m "${ftxn50[@]}") fp99=$(m "${ftxn99[@]}")
gp50=$(m "${fwatch50[@]}") gp99=$(m "${fwatch99[@]}")
tr1=$(m "${rate1[@]}") tr8=$(m "${rate8[@]}") tr8p50=$(m "${rate8p50[@]}")
er1=$(m "${erate1[@]}") er8=$(m "${erate8[@]}") er8p50=$(m "${erate8p50[@]}")
atleast() { awk -v v="$1" -v g="$2" 'BEGIN { print (v >= g ? "yes" : "NO") }'; }
lp50=$(m "${floor50[@]}") lp99=$(m "${floor99[@]}") lsp50=$(m "${fset50[@]}") lsp99=$(m "${fset99[@]}")
r50=$(ratio "$pp50" "$wp50") r99=$(ratio "$pp99" "$wp99")
l50=$(ratio "$lp50" "$wp50") l99=$(ratio "$lp99" "$wp99")
tick_us=$(( 1000000 / $(getconf CLK_TCK) ))
per_call() { awk -v x="$1" -v n="$((calls * rounds))" 'BEGIN { printf "%.0f", x / n }'; }

out="bench/out/fleet-$(date -u +%Y%m%d-%H%M%S).txt"
{
  echo "bench/fleet.sh --calls $calls --rounds $rounds, hosts' store: $store, $(date -u +%Y-%m-%dT%H:%M:%SZ), git $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(etcd --version | head -1)"
  echo
  echo "| work | reference | measured | ratio | goal | met |"
  echo "| --- | --- | --- | --- | --- | --- |"
  echo "| Set on A → PropertiesChanged on B, p50 | put → watch event $(ms "$wp50") ms | $(ms "$pp50") ms | $r50 | <= 1.5x | $(met "$r50" 1.5) |"
  echo "| Set on A → PropertiesChanged on B, p99 | put → watch event $(ms "$wp99") ms | $(ms "$pp99") ms | $r99 | - | - |"
  echo "| fleet Set round trip on A, p50 | txn (compare + put) $(ms "$tp50") ms | $(ms "$sp50") ms | $(ratio "$sp50" "$tp50") | - | - |"
  echo "| fleet Set round trip on A, p99 | txn (compare + put) $(ms "$tp99") ms | $(ms "$sp99") ms | $(ratio "$sp99" "$tp99") | - | - |"
  echo "| fleet Set round trip on A, p50 | propbusd's txn shape $(ms "$fp50") ms | $(ms "$sp50") ms | $(ratio "$sp50" "$fp50") | - | - |"
  echo "| Set on A → PropertiesChanged on B, minimal C hosts (floor), p50 | put → watch event $(ms "$wp50") ms | floor $(ms "$lp50") ms | $l50 | <= 1.5x | $(met "$l50" 1.5) |"
  echo "| Set on A → PropertiesChanged on B, minimal C hosts (floor), p99 | put → watch event $(ms "$wp99") ms | floor $(ms "$lp99") ms | $l99 | - | - |"
  echo "| etcd alone in the fleet's shape (propbusd's txn → 2nd of two watches), p50 | put → watch event $(ms "$wp50") ms | etcd $(ms "$gp50") ms | $(ratio "$gp50" "$wp50") | - | - |"
  echo "| etcd alone in the fleet's shape, p99 | put → watch event $(ms "$wp99") ms | etcd $(ms "$gp99") ms | $(ratio "$gp99" "$wp99") | - | - |"
  echo "| Set on A → PropertiesChanged on B, floor / etcd in the fleet's shape, p50 | etcd $(ms "$gp50") ms | floor $(ms "$lp50") ms | $(ratio "$lp50" "$gp50") | - | - |"
  echo "| Set on A → PropertiesChanged on B, propbus / floor, p50 | floor $(ms "$lp50") ms | $(ms "$pp50") ms | $(ratio "$pp50" "$lp50") | - | - |"
  echo "| fleet Set round trip on A, minimal C host (floor), p50 | propbusd's txn shape $(ms "$fp50") ms | floor $(ms "$lsp50") ms | $(ratio "$lsp50" "$fp50") | - | - |"
  echo "| fleet Set round trip on A, propbus / floor, p50 | floor $(ms "$lsp50") ms | $(ms "$sp50") ms | $(ratio "$sp50" "$lsp50") | - | - |"
  echo "| fleet Sets/s on A, 1 writer | etcd txns/s of propbusd's shape, 1 client: $er1 | $tr1 | $(ratio "$tr1" "$er1") | - | - |"
  echo "| fleet Sets/s on A, $writers writers | etcd txns/s of propbusd's shape, $writers clients: $er8 | $tr8 | $(ratio "$tr8" "$er8") | >= 0.5x | $(atleast "$(ratio "$tr8" "$er8")" 0.5) |"
  echo "| fleet Set on A, $writers writers, p50 | etcd txn, $writers clients, p50 $(ms "$er8p50") ms | $(ms "$tr8p50") ms | $(ratio "$tr8p50" "$er8p50") | - | - |"
  echo
  echo "CPU per call, µs (utime+stime over all rounds / $((calls * rounds)) calls, ${tick_us} µs ticks; client: the measuring C program; wall: the measurement's elapsed time per call; busy: sum / wall, in cores of $(nproc))"
  echo
  header="| measurement |" rule="| --- |"
  for name in "${cpu_names[@]}" client sum wall busy; do header+=" $name |" rule+=" --- |"; done
  echo "$header"
  echo "$rule"
  for name in "${measurements[@]}"; do
    row="| $name |" sum=0
    for i in "${!cpu_pids[@]}"; do
      us=$(( ${cpu_ticks[$name,$i]} * tick_us ))
      sum=$(( sum + us ))
      row+=" $(per_call "$us") |"
    done
    sum=$(( sum + ${client_us[$name]} ))
    row+=" $(per_call "${client_us[$name]}") | $(per_call "$sum") | $(per_call "${wall_us[$name]}") | $(ratio "$sum" "${wall_us[$name]}") |"
    echo "$row"
  done
} | tee "$out"
echo "(saved to $out)" >&2
