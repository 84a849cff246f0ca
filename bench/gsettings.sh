#!/usr/bin/env bash
# GSettings through the propbus backend module vs through dconf's, side by side in one run.
#
#   bench/gsettings.sh [--rounds N] [--reads N] [--writes N]
#
#   --rounds N   rounds, each measuring both backends in turn (default 5, env ROUNDS)
#   --reads N    cached reads per measurement (default 200000)
#   --writes N   writes per measurement (default 300)
#   env BIN      measure $BIN/propbusd and $BIN/libgiopropbus.so instead of a release build
#
# One private bus with dconf-service activatable (as in a session) and a release propbusd on
# it; bench/ref/gsettings-probe.c is the GSettings user, the same program run with
# GSETTINGS_BACKEND=dconf and =propbus against one compiled test schema. Rows: a cached read
# (g_settings_get_value after a first one: dconf reads its mmapped database, propbus its copy
# kept by signals; the reading thread's CPU time); the first read of a new path (dconf: nothing to load; propbus: AddMatch and
# one ListProperties); an acknowledged write (g_settings_set + g_settings_sync: dconf-service
# writes its database file, propbusd commits to SQLite with fsync); a burst of writes then one
# sync (both merge pending writes into the next batch). Prints the medians and the ratio
# propbus / dconf (also saved under bench/out/). See bench/README.md.
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"

rounds=${ROUNDS:-5} reads=200000 writes=300 firsts=200
while [ $# -gt 0 ]; do
  case $1 in
    --rounds) rounds=$2; shift 2 ;;
    --reads) reads=$2; shift 2 ;;
    --writes) writes=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "gsettings: unknown argument '$1' (try --help)" >&2; exit 64 ;;
  esac
done

# --- build ---------------------------------------------------------------------------
scripts/setup
mkdir -p bench/out
bench_cc gsettings-probe gio-2.0
bench_bin propbusd giopropbus
[ -f "$bin/libgiopropbus.so" ] || { echo "gsettings: $bin/libgiopropbus.so was not built" >&2; exit 1; }

# --- one private bus: dconf-service activatable, propbusd started -----------------------
bench_start_bus gsettings '<servicedir>@TMP@/services</servicedir>'
mkdir -p "$tmp/services" "$tmp/config" "$tmp/runtime" "$tmp/schemas"
chmod 700 "$tmp/runtime"
# The bus reads the directory again when asked for a name it does not know.
grep -v '^SystemdService=' /usr/share/dbus-1/services/ca.desrt.dconf.service > "$tmp/services/ca.desrt.dconf.service"
echo "user-db:user" > "$tmp/profile"
export XDG_CONFIG_HOME="$tmp/config" XDG_RUNTIME_DIR="$tmp/runtime" DCONF_PROFILE="$tmp/profile" HOME="$tmp"
export DBUS_SESSION_BUS_ADDRESS=$ADDR
# dconf-service, started by the bus, takes the bus's environment: its database goes to $tmp too.
busctl --address="$ADDR" call org.freedesktop.DBus /org/freedesktop/DBus org.freedesktop.DBus UpdateActivationEnvironment \
  'a{ss}' 4 XDG_CONFIG_HOME "$XDG_CONFIG_HOME" XDG_RUNTIME_DIR "$XDG_RUNTIME_DIR" DCONF_PROFILE "$DCONF_PROFILE" HOME "$HOME"

STATE_DIRECTORY="$tmp/state" XDG_STATE_HOME="$tmp/xdg-state" "$bin/propbusd" --address "$ADDR" >"$tmp/propbusd.log" 2>&1 &
daemon_pid=$!; pids+=("$daemon_pid")
bench_wait_started org.propbus.PropBus1 "$daemon_pid" "$tmp/propbusd.log"

cat > "$tmp/schemas/org.propbus.bench.gschema.xml" <<'XML'
<schemalist>
  <schema id="org.propbus.bench" path="/org/propbus/bench/">
    <key name="counter" type="i"><default>0</default></key>
  </schema>
  <schema id="org.propbus.bench.profile">
    <key name="counter" type="i"><default>0</default></key>
  </schema>
</schemalist>
XML
glib-compile-schemas "$tmp/schemas"
export GSETTINGS_SCHEMA_DIR="$tmp/schemas"
# Only propbus's module from $bin: GIO loads every lib*.so of an extra modules directory.
mkdir -p "$tmp/modules"
ln -s "$bin/libgiopropbus.so" "$tmp/modules/libgiopropbus.so"

probe() {  # BACKEND MODE COUNT
  if [ "$1" = propbus ]; then
    GSETTINGS_BACKEND=propbus GIO_EXTRA_MODULES="$tmp/modules" bench/build/gsettings-probe org.propbus.bench counter "$2" "$3"
  else
    GSETTINGS_BACKEND=dconf bench/build/gsettings-probe org.propbus.bench counter "$2" "$3"
  fi
}

# The key exists in both before anything is timed (propbus creates it on the first write).
probe dconf write 2 >/dev/null
[ -f "$tmp/config/dconf/user" ] || { echo "gsettings: dconf-service did not write its database into $tmp" >&2; exit 1; }
probe propbus write 2 >/dev/null

declare -A results
for round in $(seq "$rounds"); do
  for backend in dconf propbus; do
    results[$backend-read]+=" $(probe "$backend" read "$reads")"
    results[$backend-first]+=" $(probe "$backend" first "$firsts")"
    results[$backend-write]+=" $(probe "$backend" write "$writes")"
    results[$backend-burst]+=" $(probe "$backend" burst "$((writes * 10))")"
  done
  echo "gsettings: round $round of $rounds" >&2
done

out="bench/out/gsettings-$(date +%Y%m%d-%H%M%S).txt"
{
  echo "GSettings through propbus vs dconf, median of $rounds rounds (load $(cut -d' ' -f1-3 /proc/loadavg))"
  printf '%-58s %14s %14s %8s\n' "row" "dconf" "propbus" "ratio"
  row() {  # LABEL KEY DIVISOR UNIT
    local d p
    d=$(bench_median ${results[dconf-$2]}) p=$(bench_median ${results[propbus-$2]})
    awk -v label="$1" -v d="$d" -v p="$p" -v div="$3" -v unit="$4" \
      'BEGIN { printf "%-58s %11.2f %s %11.2f %s %8.2f\n", label, d / div, unit, p / div, unit, p / d }'
  }
  row "cached read (g_settings_get_value), CPU per read" read 1 ns
  row "first read of a new path (subscribe + load), per path" first 1000 us
  row "acknowledged write (set + g_settings_sync), per write" write 1000 us
  row "burst of $((writes * 10)) writes then one sync, per write" burst 1000 us
} | tee "$out"
