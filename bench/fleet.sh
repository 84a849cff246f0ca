#!/usr/bin/env bash
# Fleet keys: two hosts through one etcd, next to etcd's own latencies.
#
#   bench/fleet.sh [--quick] [--in-memory] [--calls N] [--rounds R]
#   bench/fleet.sh --hosts N [--in-memory] [--calls N]
#   bench/fleet.sh --memory [--keys K]
#   bench/fleet.sh --trace [--calls N] [--in-memory]
#   bench/fleet.sh --wire
#
#   --quick      fewer calls and one round (a smoke run, not figures)
#   --in-memory  hosts keep their mirror in memory (no fsync of their own): what the fleet
#                path costs without the store's commit
#   --calls N    calls per measurement (default 500)
#   --rounds R   rounds of the eight measurements, interleaved (default 3); each row is the
#                median over rounds of that round's p50 and p99
#   --hosts N    instead of the rows below: N hosts, each on its own bus, and one row: Set on the
#                first host → PropertiesChanged from every host (the writer's included), p50/p99
#                of --calls Sets (bench/ref/fleet-latency.c fanout), with etcd's and the hosts'
#                CPU per Set
#   --memory     instead of the rows below: RSS (and its anonymous part, /proc/PID/smaps_rollup)
#                of a daemon without --fleet, empty and with K local keys (a model file), against
#                a daemon with --fleet, with no fleet keys, with the same K keys in a model file
#                as fleet keys (it offers them to etcd), with them mirrored from etcd by a fresh
#                host (one full read), and that host restarted (resumed from its store)
#   --keys K     keys of --memory (default 10000), each with a value
#   --trace      instead of the rows below: Set on A → PropertiesChanged on B, propbusd and floor,
#                with `perf trace` on both hosts (their socket syscalls, bench/ref/fleet-trace.py):
#                the path's latency split into A's part (the Set read from the bus until the txn
#                is written to etcd), etcd's (until B reads the watch event) and B's (until it
#                writes the PropertiesChanged), medians of --calls Sets; with env FLEET_PROFILE=1
#                a perf profile of each host instead (bench/out/perf-HOSTS-a|b.data)
#   --wire       instead of the rows below: one Set's txn as host A sends it and its watch event as
#                host B reads it, propbusd and floor (strace of both hosts), taken apart byte by
#                byte (bench/ref/fleet-wire.py): compares, operations, keys, the value's frame, the
#                value, its attribution, and what base64 and JSON add
#   env BIN      a directory holding a prebuilt propbusd, instead of a release build
#   env FLOOR_ATTRIBUTION=N  the floor's values carry N bytes more, in propbusd's attributed
#                format (233: the size of a local caller's attribution, so the floor's txn is
#                as long as propbusd's, 810 against 812 bytes); default 0, the bare value
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
#       txnrate), goal for 8: >= 0.5x; and for the 8 writers, fleet Sets per etcd txn (the etcd
#       revisions the row made) and the CPU per Set of etcd, host A and host B
# Then the CPU per call of every process in each measurement (/proc/PID/stat utime+stime
# before and after, the client's from its rusage), summed over rounds: on 2 cores, CPU is what
# sets the latency. Prints the tables (also saved under bench/out/). See bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"

calls=500 rounds=3 store=sqlite hosts="" memory=0 keys=10000 trace=0 wire=0
while [ $# -gt 0 ]; do
  case $1 in
    --quick) calls=100 rounds=1; shift ;;
    --hosts) hosts=$2; shift 2 ;;
    --memory) memory=1; shift ;;
    --trace) trace=1; shift ;;
    --wire) wire=1; shift ;;
    --keys) keys=$2; shift 2 ;;
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
start_host() { # LETTER ADDRESS [OPTION...]: host LETTER of the fleet /bench (env FLEET: another --fleet)
  local name=$1 address=$2 store_option=(--state-dir "$tmp/state-$1")
  shift 2
  [ "$store" = sqlite ] || store_option=(--in-memory)
  ADDR=$address "$bin/propbusd" --address "$address" "${store_option[@]}" --max-properties 200000 \
    --fleet "${FLEET:-etcd://127.0.0.1:$client_port/bench}" --fleet-host "$name" "$@" 2> "$tmp/propbusd-$name.log" &
  pids+=("$!") host_pid=$!
  ADDR=$address bench_wait_owner "$NAME"
}
start_floor() { # LETTER ADDRESS: a fleet-floor host (it owns the name once its watch is created)
  bench/build/fleet-floor "$2" "$ETCD" /floor/ bench.x 2> "$tmp/floor-$1.log" &
  pids+=("$!") host_pid=$!
  ADDR=$2 bench_wait_owner "$NAME" || { cat "$tmp/floor-$1.log" >&2; exit 1; }
}
fleet_state() { # ADDRESS
  busctl --address="$1" get-property "$NAME" "$ROOT" org.propbus.PropBus1.Manager FleetState 2>/dev/null | cut -d'"' -f2
}
wait_connected() { # ADDRESS
  for _ in $(seq 200); do [ "$(fleet_state "$1")" = connected ] && return; sleep 0.05; done
  echo "fleet: a host is not connected to etcd:" >&2; cat "$tmp"/propbusd-*.log >&2; exit 1
}
ticks() { # PID: utime + stime, in clock ticks (all threads)
  local stat
  stat=$(< "/proc/$1/stat") || { echo 0; return; }
  stat=${stat##*) }  # comm may hold spaces; the fields after it are from state (field 3) on
  set -- $stat
  echo $(( ${12} + ${13} ))
}
ms() { awk -v us="$1" 'BEGIN { printf "%.2f", us / 1000 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
met() { awk -v v="$1" -v g="$2" 'BEGIN { print (v <= g ? "yes" : "NO") }'; }
header_line() { # WHAT: the first line of a saved table
  echo "bench/fleet.sh $1, hosts' store: $store, $(date -u +%Y-%m-%dT%H:%M:%SZ), git $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(etcd --version | head -1)"
}

if [ -n "$hosts" ]; then
  # N hosts of one fleet, each on a bus of its own (as N machines would be); one fleet key.
  addresses=() host_pids=()
  for h in $(seq "$hosts"); do
    start_bus "h$h"
    start_host "h$h" "$address"
    addresses+=("$address") host_pids+=("$host_pid")
  done
  for address in "${addresses[@]}"; do wait_connected "$address"; done
  busctl --address="${addresses[0]}" call "$NAME" "$ROOT" org.propbus.PropBus1.Manager CreateProperty 'ssva{sv}' \
    bench.x i i 0 1 scope s fleet >/dev/null
  for address in "${addresses[@]}"; do
    for _ in $(seq 200); do
      busctl --address="$address" get-property "$NAME" "$ROOT/bench" org.propbus.PropBus1.Values x >/dev/null 2>&1 && break
      sleep 0.05
    done
  done
  bench/build/fleet-latency fanout "$ROOT/bench" x 20 "${addresses[@]}" > /dev/null   # warm-up
  etcd_before=$(ticks "$etcd_pid") hosts_before=0
  for pid in "${host_pids[@]}"; do hosts_before=$(( hosts_before + $(ticks "$pid") )); done
  read -r p50 p99 max _ < <(bench/build/fleet-latency fanout "$ROOT/bench" x "$calls" "${addresses[@]}")
  hosts_after=0
  for pid in "${host_pids[@]}"; do hosts_after=$(( hosts_after + $(ticks "$pid") )); done
  tick_us=$(( 1000000 / $(getconf CLK_TCK) ))
  etcd_cpu=$(( ($(ticks "$etcd_pid") - etcd_before) * tick_us / calls ))
  hosts_cpu=$(( (hosts_after - hosts_before) * tick_us / calls ))
  out="bench/out/fleet-hosts-$hosts-$(date -u +%Y%m%d-%H%M%S).txt"
  {
    header_line "--hosts $hosts --calls $calls"
    echo
    echo "| hosts | Set → PropertiesChanged on every host, p50 | p99 | max | etcd CPU per Set | all hosts' CPU per Set |"
    echo "| --- | --- | --- | --- | --- | --- |"
    echo "| $hosts | $(ms "$p50") ms | $(ms "$p99") ms | $(ms "$max") ms | $etcd_cpu µs | $hosts_cpu µs |"
  } | tee "$out"
  echo "(saved to $out)" >&2
  exit 0
fi

if [ "$memory" = 1 ]; then
  # The same K keys (type i, each with a value) declared by a model file, local or fleet-scoped.
  for scope in local fleet; do
    /usr/bin/python3 - "$tmp/model-$scope.json" "$keys" "$scope" <<'PY'
import json, sys
path, count, scope = sys.argv[1], int(sys.argv[2]), sys.argv[3]
groups = {}
for n in range(count):
    groups.setdefault(f"g{n // 100}", {"properties": {}})["properties"][f"p{n % 100}"] = {"type": "i", "default": 0, "value": n, "scope": scope}
json.dump({"description": f"bench: {count} {scope} keys", "groups": groups}, open(path, "w"))
PY
  done
  memory_of() { # PID: "RSS anonymous" in KiB, once start-up work has settled (the daemon gives a
    # burst's freed memory back after a quiet second)
    sleep 3
    awk '/^Rss:/ { r = $2 } /^Anonymous:/ { a = $2 } END { print r, a }' "/proc/$1/smaps_rollup"
  }
  start_plain() { # NAME ADDRESS [OPTION...]: a daemon without --fleet
    local name=$1 address=$2
    shift 2
    ADDR=$address "$bin/propbusd" --address "$address" --state-dir "$tmp/state-$name" --max-properties 200000 "$@" 2> "$tmp/propbusd-$name.log" &
    pids+=("$!") host_pid=$!
    ADDR=$address bench_wait_owner "$NAME"
  }
  etcd_keys() { # PREFIX: "DEFINITIONS VALUES NEWEST-MOD-REVISION" under PREFIX (etcdctl 3.4 has no --count-only)
    /usr/bin/python3 - "$ETCD" "$1" <<'PY'
import base64, json, sys, urllib.request
etcd, prefix = sys.argv[1], sys.argv[2].encode()
end = prefix[:-1] + bytes([prefix[-1] + 1])
body = json.dumps({"key": base64.b64encode(prefix).decode(), "range_end": base64.b64encode(end).decode(), "keys_only": True}).encode()
kvs = json.load(urllib.request.urlopen(urllib.request.Request(etcd + "/v3/kv/range", body))).get("kvs", [])
count = lambda part: sum(1 for kv in kvs if base64.b64decode(kv["key"]).startswith(prefix + part))
print(count(b"defs/"), count(b"keys/"), max([int(kv["mod_revision"]) for kv in kvs] + [0]))
PY
  }
  fleet_revision() { # ADDRESS
    busctl --address="$1" get-property "$NAME" "$ROOT" org.propbus.PropBus1.Manager FleetRevision 2>/dev/null | cut -d' ' -f2
  }
  wait_mirrored() { # ADDRESS PREFIX: until the host has every key etcd holds under PREFIX
    local definitions values newest
    for _ in $(seq 600); do
      read -r definitions values newest < <(etcd_keys "$2")
      if [ "$definitions" = "$keys" ] && [ "$values" = "$keys" ]; then
        [ "$(fleet_revision "$1")" -ge "$newest" ] 2>/dev/null && return
      fi
      sleep 0.5
    done
    echo "fleet: the $keys keys did not reach etcd and the host:" >&2; tail "$tmp"/propbusd-*.log >&2; exit 1
  }
  declare -A rss=() anon=()
  measure_memory() { # ROW PID
    read -r "rss[$1]" "anon[$1]" < <(memory_of "$2")
    echo "fleet: $1: ${rss[$1]} KiB RSS" >&2
  }
  start_plain local0 "$ADDR_A"; measure_memory local0 "$host_pid"; bench_stop_pid "$host_pid"; ADDR=$ADDR_A bench_wait_gone "$NAME"
  FLEET=etcd://127.0.0.1:$client_port/empty start_host fleet0 "$ADDR_A"; wait_connected "$ADDR_A"
  measure_memory fleet0 "$host_pid"; bench_stop_pid "$host_pid"; ADDR=$ADDR_A bench_wait_gone "$NAME"
  start_plain local "$ADDR_A" --model "$tmp/model-local.json"; measure_memory local "$host_pid"
  bench_stop_pid "$host_pid"; ADDR=$ADDR_A bench_wait_gone "$NAME"
  start_plain local "$ADDR_A" --model "$tmp/model-local.json"; measure_memory local-restarted "$host_pid"
  bench_stop_pid "$host_pid"; ADDR=$ADDR_A bench_wait_gone "$NAME"
  FLEET=etcd://127.0.0.1:$client_port/mem start_host a "$ADDR_A" --model "$tmp/model-fleet.json"; host_a=$host_pid
  wait_connected "$ADDR_A"; wait_mirrored "$ADDR_A" /mem/; measure_memory declared "$host_a"
  FLEET=etcd://127.0.0.1:$client_port/mem start_host b "$ADDR_B"; host_b=$host_pid
  wait_connected "$ADDR_B"; wait_mirrored "$ADDR_B" /mem/; measure_memory mirrored "$host_b"
  bench_stop_pid "$host_b"; ADDR=$ADDR_B bench_wait_gone "$NAME"
  FLEET=etcd://127.0.0.1:$client_port/mem start_host b "$ADDR_B"; host_b=$host_pid
  wait_connected "$ADDR_B"; wait_mirrored "$ADDR_B" /mem/; measure_memory resumed "$host_b"
  mib() { awk -v k="$1" 'BEGIN { printf "%.1f", k / 1024 }'; }
  row() { # LABEL ROW REFERENCE-ROW [GOAL]
    local r; r=$(ratio "${rss[$2]}" "${rss[$3]}")
    echo "| $1 | $(mib "${rss[$2]}") MiB ($(mib "${anon[$2]}") anonymous) | $(mib "${rss[$3]}") MiB ($(mib "${anon[$3]}")) | $r | ${4:--} | $([ -n "${4:-}" ] && met "$r" "${4#<= }" || echo -) |"
  }
  out="bench/out/fleet-memory-$(date -u +%Y%m%d-%H%M%S).txt"
  {
    header_line "--memory --keys $keys"
    echo
    echo "| daemon | RSS | reference: the same keys local (no --fleet) | ratio | goal | met |"
    echo "| --- | --- | --- | --- | --- | --- |"
    row "--fleet, no fleet keys (reference: an empty daemon)" fleet0 local0
    row "--fleet, $keys fleet keys its model file declares, first start (it offers them to etcd)" declared local "<= 1.5"
    row "--fleet, the $keys fleet keys mirrored by a fresh host (one full read; reference: restarted)" mirrored local-restarted "<= 1.5"
    row "--fleet, that host restarted (resumed from its store)" resumed local-restarted "<= 1.5"
    row "(reference: $keys local keys from a model file, first start, against an empty daemon)" local local0
    row "(reference: the same, restarted with its store, against an empty daemon)" local-restarted local0
  } | tee "$out"
  echo "(saved to $out)" >&2
  exit 0
fi

start_host a "$ADDR_A"; host_a=$host_pid
start_host b "$ADDR_B"; host_b=$host_pid
start_floor a "$ADDR_FA"; floor_a=$host_pid
start_floor b "$ADDR_FB"; floor_b=$host_pid
for address in "$ADDR_A" "$ADDR_B"; do wait_connected "$address"; done
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

if [ "$wire" = 1 ]; then
  wire_pair() { # LABEL ADDRESS-A ADDRESS-B PID-A PID-B: strace both hosts around 3 Sets
    bench/build/fleet-latency propagate "$2" "$3" "$ROOT/bench" x 5 > /dev/null
    strace -f -xx -s 65536 -e trace=sendto -p "$4" -o "$tmp/wire-$1-a.txt" 2>/dev/null & local tracer_a=$!
    strace -f -xx -s 65536 -e trace=recvfrom -p "$5" -o "$tmp/wire-$1-b.txt" 2>/dev/null & local tracer_b=$!
    sleep 1  # strace attaches to every thread
    bench/build/fleet-latency propagate "$2" "$3" "$ROOT/bench" x 3 > /dev/null
    kill -INT "$tracer_a" "$tracer_b"; wait "$tracer_a" "$tracer_b" 2>/dev/null || true
    /usr/bin/python3 bench/ref/fleet-wire.py "$1" "$tmp/wire-$1-a.txt" "$tmp/wire-$1-b.txt" bench.x
  }
  out="bench/out/fleet-wire-$(date -u +%Y%m%d-%H%M%S).txt"
  {
    header_line "--wire"
    echo
    echo "| part | bytes |"
    echo "| --- | --- |"
    wire_pair propbusd "$ADDR_A" "$ADDR_B" "$host_a" "$host_b"
    wire_pair floor "$ADDR_FA" "$ADDR_FB" "$floor_a" "$floor_b"
  } | tee "$out"
  echo "(saved to $out)" >&2
  exit 0
fi

if [ "$trace" = 1 ]; then
  # Each host pair: perf trace on both hosts (all threads, the socket syscalls, monotonic
  # timestamps, one file per host) around one propagate measurement, after a warm-up.
  trace_pair() { # LABEL ADDRESS-A ADDRESS-B PID-A PID-B
    bench/build/fleet-latency propagate "$2" "$3" "$ROOT/bench" x 50 > /dev/null
    local tracers=() side pid
    for side in a b; do
      [ "$side" = a ] && pid=$4 || pid=$5
      if [ -n "${FLEET_PROFILE:-}" ]; then  # instead: a perf profile of each host, bench/out/perf-LABEL-SIDE.data
        perf record -F 2999 -g -p "$pid" -o "bench/out/perf-$1-$side.data" 2>/dev/null &
      else
        perf trace -T -p "$pid" -e sendmsg,recvmsg,sendto,recvfrom,write,writev,read -o "$tmp/trace-$1-$side.txt" 2>/dev/null &
      fi
      tracers+=("$!")
    done
    sleep 1  # perf attaches to every thread
    bench/build/fleet-latency propagate "$2" "$3" "$ROOT/bench" x "$calls" > "$tmp/trace-$1-latency"
    kill -INT "${tracers[@]}"; wait "${tracers[@]}" 2>/dev/null || true
    [ -z "${FLEET_PROFILE:-}" ] || return 0
    /usr/bin/python3 bench/ref/fleet-trace.py "$1" "$tmp/trace-$1-a.txt" "$tmp/trace-$1-b.txt" "$tmp/trace-$1-latency"
    cp "$tmp/trace-$1-a.txt" "$tmp/trace-$1-b.txt" bench/out/  # the raw traces, for a closer look
  }
  out="bench/out/fleet-trace-$(date -u +%Y%m%d-%H%M%S).txt"
  {
    header_line "--trace --calls $calls"
    echo
    echo "| hosts | Set → PropertiesChanged p50 (traced) | A: Set read → txn written | etcd: txn written → B reads the event | B: event read → PropertiesChanged written | A: txn written → answer read | Sets matched |"
    echo "| --- | --- | --- | --- | --- | --- | --- |"
    trace_pair propbusd "$ADDR_A" "$ADDR_B" "$host_a" "$host_b"
    trace_pair floor "$ADDR_FA" "$ADDR_FB" "$floor_a" "$floor_b"
  } | tee "$out"
  echo "(saved to $out)" >&2
  exit 0
fi

# CPU accounting: the processes, and per measurement the ticks each used, summed over rounds.
cpu_names=(etcd "propbusd A" "propbusd B" "bus A" "bus B" "floor A" "floor B" "floor bus A" "floor bus B")
cpu_pids=("$etcd_pid" "$host_a" "$host_b" "$bus_a" "$bus_b" "$floor_a" "$floor_b" "$bus_fa" "$bus_fb")
declare -A cpu_ticks=() client_us=() wall_us=()
measurements=()
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

# A throughput measurement (CMD…, printing "rate p50 p99 n"): sets $rate and $rate_p50, and
# $rate_n (calls), $rate_txns (etcd revisions it made: one per txn) and $rate_cpu (etcd's,
# propbusd A's and B's ticks).
etcd_revision() { ETCDCTL_API=3 etcdctl --endpoints "$ETCD" get probe -w json | grep -o '"revision":[0-9]*' | head -1 | cut -d: -f2; }
measure_rate() {
  local before=() first i
  for i in 0 1 2; do before[i]=$(ticks "${cpu_pids[i]}"); done
  first=$(etcd_revision)
  "$@" > "$tmp/measure-rate"
  rate_txns=$(( $(etcd_revision) - first )) rate_cpu=""
  for i in 0 1 2; do rate_cpu+="$(( $(ticks "${cpu_pids[i]}") - before[i] )) "; done
  read -r rate rate_p50 _ rate_n < "$tmp/measure-rate"
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
  rate8n=$(( ${rate8n:-0} + rate_n )) rate8txns=$(( ${rate8txns:-0} + rate_txns ))
  read -r c_etcd c_a c_b <<< "$rate_cpu"
  rate8cpu_etcd=$(( ${rate8cpu_etcd:-0} + c_etcd )) rate8cpu_a=$(( ${rate8cpu_a:-0} + c_a )) rate8cpu_b=$(( ${rate8cpu_b:-0} + c_b ))
  measure_rate bench/build/etcd-latency txnrate "$ETCD" /ref/rate 1 "$calls"; erate1+=("$rate")
  measure_rate bench/build/etcd-latency txnrate "$ETCD" /ref/rate "$writers" "$calls"; erate8+=("$rate") erate8p50+=("$rate_p50")
  echo "fleet: round $round of $rounds done" >&2
done

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
  header_line "--calls $calls --rounds $rounds"
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
  echo "| Set on A → PropertiesChanged on B, propbus / floor, p50 | floor $(ms "$lp50") ms | $(ms "$pp50") ms | $(ratio "$pp50" "$lp50") | <= 1.15x | $(met "$(ratio "$pp50" "$lp50")" 1.15) |"
  echo "| Set on A → PropertiesChanged on B, propbus / floor, p99 | floor $(ms "$lp99") ms | $(ms "$pp99") ms | $(ratio "$pp99" "$lp99") | - | - |"
  echo "| fleet Set round trip on A, minimal C host (floor), p50 | propbusd's txn shape $(ms "$fp50") ms | floor $(ms "$lsp50") ms | $(ratio "$lsp50" "$fp50") | - | - |"
  echo "| fleet Set round trip on A, propbus / floor, p50 | floor $(ms "$lsp50") ms | $(ms "$sp50") ms | $(ratio "$sp50" "$lsp50") | - | - |"
  echo "| fleet Sets/s on A, 1 writer | etcd txns/s of propbusd's shape, 1 client: $er1 | $tr1 | $(ratio "$tr1" "$er1") | - | - |"
  echo "| fleet Sets/s on A, $writers writers | etcd txns/s of propbusd's shape, $writers clients: $er8 | $tr8 | $(ratio "$tr8" "$er8") | >= 0.5x | $(atleast "$(ratio "$tr8" "$er8")" 0.5) |"
  echo "| fleet Set on A, $writers writers, p50 | etcd txn, $writers clients, p50 $(ms "$er8p50") ms | $(ms "$tr8p50") ms | $(ratio "$tr8p50" "$er8p50") | - | - |"
  echo "| fleet Sets per etcd txn, $writers writers | $rate8txns txns (etcd revisions) | $rate8n Sets | $(ratio "$rate8n" "$rate8txns") | - | - |"
  echo "| CPU per fleet Set, $writers writers: etcd / propbusd A / propbusd B | - | $(awk -v n="$rate8n" -v t="$tick_us" -v e="$rate8cpu_etcd" -v a="$rate8cpu_a" -v b="$rate8cpu_b" 'BEGIN { printf "%.0f / %.0f / %.0f µs", e * t / n, a * t / n, b * t / n }') | - | - | - |"
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
