# Shared pieces of the bench scripts; source it after `cd` to the repository root.
#
#   bench_start_bus LABEL [EXTRA-CONFIG-XML]   temp dir $tmp, a private dbus-daemon at $ADDR,
#                                             and an EXIT trap that stops everything in $pids
#   bench_has_owner NAME                      whether NAME is owned on $ADDR
#   bench_wait_owner NAME                     waits up to 15 s for NAME
#   bench_need PKG...                         installs Debian packages (as root) when missing
#   bench_cc PROG                             builds bench/ref/PROG.c against libdbus into
#                                             bench/build/PROG (installing gcc when missing)

bench_need() {
  [ $# -gt 0 ] || return 0
  [ "$(id -u)" -eq 0 ] || { echo "bench: missing $*; run: sudo apt-get install $*" >&2; exit 1; }
  DEBIAN_FRONTEND=noninteractive apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "$@"
}

bench_stop_all() {
  local pid
  for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done
  for pid in "${pids[@]}"; do
    for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$pid" 2>/dev/null || true
  done
  rm -rf "$tmp"
}

bench_start_bus() {
  tmp=$(mktemp -d "${TMPDIR:-/var/tmp}/propbus-$1.XXXXXX")
  pids=()
  trap bench_stop_all EXIT
  trap 'exit 130' INT TERM
  # The machine's buses are never used; the reply limit of a minimal config (128) is raised.
  cat > "$tmp/bus.conf" <<CONF
<!DOCTYPE busconfig PUBLIC "-//freedesktop//DTD D-Bus Bus Configuration 1.0//EN"
 "http://www.freedesktop.org/standards/dbus/1.0/busconfig.dtd">
<busconfig>
  <type>session</type>
  <listen>unix:path=$tmp/bus</listen>
  <auth>EXTERNAL</auth>
  <policy context="default">
    <allow send_destination="*" eavesdrop="true"/>
    <allow eavesdrop="true"/>
    <allow own="*"/>
  </policy>
  <limit name="max_replies_per_connection">50000</limit>
  <limit name="max_match_rules_per_connection">50000</limit>
  ${2:-}
</busconfig>
CONF
  local bus_pid
  { read -r ADDR; read -r bus_pid; } < <(dbus-daemon --config-file="$tmp/bus.conf" --fork --print-address=1 --print-pid=1)
  pids+=("$bus_pid")
}

bench_has_owner() {
  busctl --address="$ADDR" call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus \
    NameHasOwner s "$1" 2>/dev/null | grep -q true
}

bench_wait_owner() {
  for _ in $(seq 300); do bench_has_owner "$1" && return 0; sleep 0.05; done
  echo "bench: $1 did not appear on the bus" >&2
  return 1
}

bench_cc() {
  command -v gcc >/dev/null || bench_need gcc libc6-dev
  mkdir -p bench/build
  gcc -O2 -Wall -Wextra -o "bench/build/$1" "bench/ref/$1.c" $(pkg-config --cflags --libs dbus-1)
}
