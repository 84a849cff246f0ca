#!/usr/bin/env bash
# Fleet keys (issue 14): two hosts through one etcd, next to etcd's own latencies.
#
#   bench/fleet.sh [--quick] [--in-memory] [--calls N] [--rounds R]
#
#   --quick      fewer calls and one round (a smoke run, not figures)
#   --in-memory  hosts keep their mirror in memory (no fsync of their own): what the fleet
#                path costs without the store's commit
#   --calls N    calls per measurement (default 500)
#   --rounds R   rounds of the four measurements, interleaved (default 3); each row is the
#                median over rounds of that round's p50 and p99
#   env BIN      a directory holding a prebuilt propbusd, instead of a release build
#
# One etcd member on loopback (temp data dir, fsync on as always), two private buses, and on each
# a release propbusd --fleet etcd://…/bench --fleet-host a|b (SQLite store unless --in-memory):
# hosts A and B.
# Rows, each against its reference measured in the same run:
#   Set on A → PropertiesChanged on B (bench/ref/fleet-latency.c, libdbus)
#       vs etcd's put → watch event (bench/ref/etcd-latency.c, libcurl as propbusd uses it)
#       goal: <= 1.5x
#   fleet Set round trip on A (the txn, the mirror's commit, the reply)
#       vs a raw etcd txn comparing mod_revision and putting the key (the least one Set needs),
#       and vs the txn propbusd sends for one Set (2 compares, a put, 2 gets on failure)
# Prints a table (also saved under bench/out/). See bench/README.md.
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
bench_bin propbusd
mkdir -p bench/out

# Bus A (bench_start_bus also sets $tmp and the EXIT trap that stops everything in $pids).
bench_start_bus fleet
ADDR_A=$ADDR
sed "s|unix:path=$tmp/bus|unix:path=$tmp/bus-b|" "$tmp/bus.conf" > "$tmp/bus-b.conf"
{ read -r ADDR_B; read -r bus_b; } < <(dbus-daemon --config-file="$tmp/bus-b.conf" --fork --print-address=1 --print-pid=1)
pids+=("$bus_b")
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
pids+=("$!")
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
  pids+=("$!")
  ADDR=$2 bench_wait_owner "$NAME"
}
fleet_state() { # ADDRESS
  busctl --address="$1" get-property "$NAME" "$ROOT" org.propbus.PropBus1.Manager FleetState 2>/dev/null | cut -d'"' -f2
}
start_host a "$ADDR_A"
start_host b "$ADDR_B"
for address in "$ADDR_A" "$ADDR_B"; do
  for _ in $(seq 200); do [ "$(fleet_state "$address")" = connected ] && break; sleep 0.05; done
  [ "$(fleet_state "$address")" = connected ] || { echo "fleet: a host is not connected to etcd:" >&2; cat "$tmp"/propbusd-*.log >&2; exit 1; }
done
busctl --address="$ADDR_A" call "$NAME" "$ROOT" org.propbus.PropBus1.Manager CreateProperty 'ssva{sv}' \
  bench.x i i 0 1 scope s fleet >/dev/null
for _ in $(seq 200); do
  busctl --address="$ADDR_B" get-property "$NAME" "$ROOT/bench" org.propbus.PropBus1.Values x >/dev/null 2>&1 && break
  sleep 0.05
done

# Interleaved rounds; each measurement prints "p50 p99 max n" in microseconds.
prop50=() prop99=() watch50=() watch99=() set50=() set99=() txn50=() txn99=() ftxn50=() ftxn99=()
for round in $(seq "$rounds"); do
  read -r p50 p99 _ < <(bench/build/fleet-latency propagate "$ADDR_A" "$ADDR_B" "$ROOT/bench" x "$calls")
  prop50+=("$p50") prop99+=("$p99")
  read -r p50 p99 _ < <(bench/build/etcd-latency watch "$ETCD" /ref/watch "$calls")
  watch50+=("$p50") watch99+=("$p99")
  read -r p50 p99 _ < <(bench/build/fleet-latency roundtrip "$ADDR_A" "$ROOT/bench" x "$calls")
  set50+=("$p50") set99+=("$p99")
  read -r p50 p99 _ < <(bench/build/etcd-latency txn "$ETCD" /ref/txn "$calls")
  txn50+=("$p50") txn99+=("$p99")
  read -r p50 p99 _ < <(bench/build/etcd-latency fleettxn "$ETCD" /ref/fleettxn "$calls")
  ftxn50+=("$p50") ftxn99+=("$p99")
  echo "fleet: round $round of $rounds done" >&2
done

ms() { awk -v us="$1" 'BEGIN { printf "%.2f", us / 1000 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
met() { awk -v v="$1" -v g="$2" 'BEGIN { print (v <= g ? "yes" : "NO") }'; }
m() { bench_median "$@"; }
pp50=$(m "${prop50[@]}") pp99=$(m "${prop99[@]}") wp50=$(m "${watch50[@]}") wp99=$(m "${watch99[@]}")
sp50=$(m "${set50[@]}") sp99=$(m "${set99[@]}") tp50=$(m "${txn50[@]}") tp99=$(m "${txn99[@]}")
fp50=$(m "${ftxn50[@]}") fp99=$(m "${ftxn99[@]}")
r50=$(ratio "$pp50" "$wp50") r99=$(ratio "$pp99" "$wp99")

out="bench/out/fleet-$(date -u +%Y%m%d-%H%M%S).txt"
{
  echo "bench/fleet.sh --calls $calls --rounds $rounds, hosts' store: $store, $(date -u +%Y-%m-%dT%H:%M:%SZ), git $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), $(etcd --version | head -1)"
  echo
  echo "| work | reference (etcd alone) | propbus | ratio | goal | met |"
  echo "| --- | --- | --- | --- | --- | --- |"
  echo "| Set on A → PropertiesChanged on B, p50 | put → watch event $(ms "$wp50") ms | $(ms "$pp50") ms | $r50 | <= 1.5x | $(met "$r50" 1.5) |"
  echo "| Set on A → PropertiesChanged on B, p99 | put → watch event $(ms "$wp99") ms | $(ms "$pp99") ms | $r99 | - | - |"
  echo "| fleet Set round trip on A, p50 | txn (compare + put) $(ms "$tp50") ms | $(ms "$sp50") ms | $(ratio "$sp50" "$tp50") | - | - |"
  echo "| fleet Set round trip on A, p99 | txn (compare + put) $(ms "$tp99") ms | $(ms "$sp99") ms | $(ratio "$sp99" "$tp99") | - | - |"
  echo "| fleet Set round trip on A, p50 | propbusd's txn shape $(ms "$fp50") ms | $(ms "$sp50") ms | $(ratio "$sp50" "$fp50") | - | - |"
} | tee "$out"
echo "(saved to $out)" >&2
