#!/usr/bin/env bash
# Hostile caller: each attack run by an unprivileged uid for a bounded time, while a
# second (root) client does Gets one at a time.
#
#   bench/hostile.sh [--seconds N] [--only NAME[,NAME...]]
#
#   --seconds N   how long each attack runs (default 4)
#   --only LIST   run only these attacks (names as printed in the table)
#   env BIN       a directory holding a prebuilt propbusd to measure instead of the release build
#
# Runs as root: the daemon (release build, a store in a temporary directory, --system-access)
# runs as root on a private dbus-daemon whose limits are those of Debian's system bus; the
# attacker runs as `nobody` through setpriv. For each attack it prints the daemon's RSS at the
# start and its peak during the attack, the victim's p50 and worst Get latency during it, how
# much the store grew, and what the attacker obtained (a secret it may not read, bindings or
# executions past its quota, root refused, the daemon gone). Before "history-scan", root writes
# HOSTILE_HISTORY_ROWS rows of history (default 180000; 0: none). Goals: peak RSS at most 2×
# the start plus the attacker's quota, the victim's worst Get at most 250 ms, the store grown by
# at most the documented bounds, nothing obtained. See bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"
seconds=4 only=""
while [ $# -gt 0 ]; do
  case $1 in
    --seconds) seconds=$2; shift 2 ;;
    --only) only=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "hostile: unknown argument '$1' (try --help)" >&2; exit 64 ;;
  esac
done
[ "$(id -u)" -eq 0 ] || { echo "hostile: run as root (the attacker is run as nobody through setpriv)" >&2; exit 1; }
scripts/setup
bench_bin propbusd
[ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import dbus' 2>/dev/null || bench_need python3-dbus

# Debian's system bus limits (max_incoming_bytes is what lets a reader that never reads make
# the bus stop reading from the daemon), and any user may connect.
bench_start_bus hostile '
  <policy context="default"><allow user="*"/></policy>
  <limit name="max_incoming_bytes">133169152</limit>
  <limit name="max_outgoing_bytes">133169152</limit>
  <limit name="max_message_size">33554432</limit>'
chmod 755 "$tmp"
mkdir -p "$tmp/state" "$tmp/models"
# A model file whose value for a secret key is refused: the refusal must not quote it.
cat > "$tmp/models/vault.json" <<'JSON'
{ "groups": { "vault": { "properties": {
  "modelpin": { "type": "s", "default": "a", "choices": ["a", "b"], "secret": true, "writers": ["root"], "value": "hunter2-token" } } } } }
JSON
cp bench/hostile.py "$tmp/hostile.py"
chmod 644 "$tmp/hostile.py" "$tmp/models/vault.json"

mkdir -p "$tmp/etc"
chmod 755 "$tmp/etc"
export HOSTILE_CONFIG_DIR="$tmp/etc"
"$bin/propbusd" --address "$ADDR" --system-access --state-dir "$tmp/state" --model "$tmp/models/vault.json" \
  --config-dir "$tmp/etc" --vendor-dir "$tmp/vendor" 2> "$tmp/propbusd.log" & pid=$!
pids+=("$pid")
bench_wait_owner org.propbus.PropBus1

/usr/bin/python3 "$tmp/hostile.py" driver "$ADDR" "$pid" "$seconds" "$only" "$tmp"
