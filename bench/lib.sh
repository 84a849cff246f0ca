# Shared pieces of the bench scripts; source it after `cd` to the repository root.
#
#   bench_start_bus LABEL [EXTRA-CONFIG-XML]   temp dir $tmp, a private dbus-daemon at $ADDR,
#                                             and an EXIT trap that stops everything in $pids;
#                                             @TMP@ in the XML stands for $tmp
#   bench_has_owner NAME                      whether NAME is owned on $ADDR
#   bench_wait_owner NAME                     waits up to 15 s for NAME
#   bench_wait_gone NAME                      waits up to 15 s for NAME to lose its owner
#   bench_wait_started NAME PID LOG [SECONDS] waits (default 20 s) for PID to own NAME; exits
#                                             with the end of LOG if PID dies or never does
#   bench_stop_pid PID                        SIGTERM, up to 5 s, then SIGKILL
#   bench_median N...                         the median of the numbers (the lower of two middles)
#   bench_need PKG...                         installs Debian packages (as root) when missing
#   bench_bin PRODUCT...                      $bin: $BIN if set (prebuilt binaries to measure,
#                                             e.g. a static build), else the release build
#                                             directory after building PRODUCTs
#   bench_cc PROG [PKG...]                    builds bench/ref/PROG.c against libdbus (and the
#                                             pkg-config modules PKG) into
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
  ${2//@TMP@/$tmp}
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

bench_wait_started() {
  local tenths=$(( ${4:-20} * 10 ))
  for _ in $(seq "$tenths"); do
    bench_has_owner "$1" && return 0
    kill -0 "$2" 2>/dev/null || { echo "bench: $1 exited during startup:" >&2; tail -20 "$3" >&2; exit 1; }
    sleep 0.1
  done
  echo "bench: $1 did not appear on the bus within ${4:-20} s:" >&2; tail -20 "$3" >&2; exit 1
}

bench_wait_owner() {
  for _ in $(seq 300); do bench_has_owner "$1" && return 0; sleep 0.05; done
  echo "bench: $1 did not appear on the bus" >&2
  return 1
}

bench_wait_gone() {
  for _ in $(seq 300); do bench_has_owner "$1" || return 0; sleep 0.05; done
}

bench_stop_pid() {
  kill "$1" 2>/dev/null || true
  for _ in $(seq 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.05; done
  kill -KILL "$1" 2>/dev/null || true
}

bench_median() {
  printf '%s\n' "$@" | sort -g | awk '{ a[NR] = $1 } END { print a[int((NR + 1) / 2)] }'
}

bench_bin() {
  if [ -n "${BIN:-}" ]; then
    bin=$(cd "$BIN" && pwd)
    return
  fi
  local product
  for product in "$@"; do swift build -c release --product "$product" >&2; done
  bin=$(swift build -c release --show-bin-path)
}

bench_cc() {
  command -v gcc >/dev/null || bench_need gcc libc6-dev
  mkdir -p bench/build
  local prog=$1; shift
  gcc -O2 -Wall -Wextra -o "bench/build/$prog" "bench/ref/$prog.c" $(pkg-config --cflags --libs dbus-1 "$@")
}
