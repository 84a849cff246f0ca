#!/usr/bin/env bash
# Client-side channel latency: a write to a file bound with `propctl bind --file` → the
# PropertiesChanged that announces the new bus value.
#
#   bench/file-binding.sh [--writes N]
#
# Runs on a private bus with release builds of propbusd (in-memory store, so no fsync is
# measured on the daemon side) and propctl. A small C libdbus client subscribes to the key's
# PropertiesChanged, then N times writes a new integer to the file and waits for the signal
# carrying it; it prints p50/p99/max in microseconds. Two ways of writing are measured: in
# place like `echo N > file` (open with O_TRUNC, write, close) and like an editor (a temporary
# file renamed over the original).
set -euo pipefail
cd "$(dirname "$0")/.."
source bench/lib.sh
command -v swift >/dev/null || export PATH="$PATH:/opt/swift/usr/bin"
writes=${WRITES:-300}
while [ $# -gt 0 ]; do
  case $1 in
    --writes) writes=$2; shift 2 ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    *) echo "file-binding: unknown argument '$1'" >&2; exit 64 ;;
  esac
done
command -v gcc >/dev/null || bench_need gcc libc6-dev
mkdir -p bench/build
cat > bench/build/file-bind-latency.c <<'C'
/* file-bind-latency ADDR PATH FILE N MODE: write N integers to FILE (MODE trunc or rename) and
 * time each until the PropertiesChanged of property "x" on PATH carries it. */
#include <dbus/dbus.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y;
}
static void write_value(const char *file, int value, int rename_mode) {
    char text[32], temp[4096];
    int n = snprintf(text, sizeof text, "%d\n", value);
    const char *target = file;
    if (rename_mode) { snprintf(temp, sizeof temp, "%s.tmp", file); target = temp; }
    int fd = open(target, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0 || write(fd, text, n) != n) { perror("write"); exit(1); }
    close(fd);
    if (rename_mode && rename(temp, file) != 0) { perror("rename"); exit(1); }
}
/* Whether msg is PropertiesChanged on path announcing x == want. */
static int announces(DBusMessage *msg, const char *path, int want) {
    if (!dbus_message_is_signal(msg, "org.freedesktop.DBus.Properties", "PropertiesChanged")) return 0;
    if (!dbus_message_has_path(msg, path)) return 0;
    DBusMessageIter it, dict, entry, variant;
    dbus_message_iter_init(msg, &it);
    if (!dbus_message_iter_next(&it)) return 0;
    dbus_message_iter_recurse(&it, &dict);
    while (dbus_message_iter_get_arg_type(&dict) == DBUS_TYPE_DICT_ENTRY) {
        const char *name; dbus_int32_t value;
        dbus_message_iter_recurse(&dict, &entry);
        dbus_message_iter_get_basic(&entry, &name);
        dbus_message_iter_next(&entry);
        dbus_message_iter_recurse(&entry, &variant);
        if (strcmp(name, "x") == 0 && dbus_message_iter_get_arg_type(&variant) == DBUS_TYPE_INT32) {
            dbus_message_iter_get_basic(&variant, &value);
            return value == want;
        }
        dbus_message_iter_next(&dict);
    }
    return 0;
}
int main(int argc, char **argv) {
    if (argc != 6) { fprintf(stderr, "usage: %s ADDR PATH FILE N trunc|rename\n", argv[0]); return 64; }
    const char *path = argv[2], *file = argv[3];
    int n = atoi(argv[4]), rename_mode = strcmp(argv[5], "rename") == 0, warmup = 30;
    DBusError err; dbus_error_init(&err);
    DBusConnection *c = dbus_connection_open_private(argv[1], &err);
    if (!c || !dbus_bus_register(c, &err)) { fprintf(stderr, "%s\n", err.message); return 1; }
    char rule[1024];
    snprintf(rule, sizeof rule, "type='signal',sender='org.propbus.PropBus1',path='%s',"
             "interface='org.freedesktop.DBus.Properties',member='PropertiesChanged'", path);
    dbus_bus_add_match(c, rule, &err);
    if (dbus_error_is_set(&err)) { fprintf(stderr, "%s\n", err.message); return 1; }
    double *lat = calloc(n, sizeof *lat);
    for (int i = 0; i < warmup + n; i++) {
        int value = 1000 + i;
        double start = now_us();
        write_value(file, value, rename_mode);
        for (;;) {
            DBusMessage *m = dbus_connection_pop_message(c);
            if (!m) {
                if (now_us() - start > 5e6) { fprintf(stderr, "no signal for %d after 5 s\n", value); return 1; }
                dbus_connection_read_write(c, 100);
                continue;
            }
            int hit = announces(m, path, value);
            dbus_message_unref(m);
            if (hit) break;
        }
        if (i >= warmup) lat[i - warmup] = now_us() - start;
    }
    qsort(lat, n, sizeof *lat, cmp);
    printf("%.1f %.1f %.1f %d\n", lat[n / 2], lat[(int)(n * 0.99)], lat[n - 1], n);
    return 0;
}
C
gcc -O2 -Wall -Wextra -o bench/build/file-bind-latency bench/build/file-bind-latency.c $(pkg-config --cflags --libs dbus-1)
bench_bin propbusd propctl

bench_start_bus file-binding
"$bin/propbusd" --address "$ADDR" --in-memory & pids+=($!)
bench_wait_owner org.propbus.PropBus1
"$bin/propctl" --address "$ADDR" create bench.x i --default 0
"$bin/propctl" --address "$ADDR" bind bench.x --file "$tmp/x" & pids+=($!)
for _ in $(seq 100); do [ "$(cat "$tmp/x" 2>/dev/null)" = 0 ] && break; sleep 0.05; done

echo "file write → PropertiesChanged(bench.x) through propctl bind --file, $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg)"
for mode in trunc rename; do
  read -r p50 p99 max n < <(bench/build/file-bind-latency "$ADDR" /org/propbus/PropBus1/bench "$tmp/x" "$writes" "$mode")
  label=$([ "$mode" = trunc ] && echo "echo N > file" || echo "temp file + rename")
  printf '%-20s p50 %7.1f us   p99 %7.1f us   max %8.1f us   (%d writes)\n' "$label" "$p50" "$p99" "$max" "$n"
done
