/* render-latency ADDR GROUP-PATH NAME FILE N: N times sets the int32 property NAME of the
 * object GROUP-PATH (Properties.Set, waiting for the reply) to a new value and times it until
 * FILE holds that value and a newline (watched with inotify on FILE's directory: a rename into
 * it or a write closed in it). Prints p50 p99 max (microseconds) and N. */
#include <dbus/dbus.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <time.h>
#include <unistd.h>

static double now_us(void) {
    struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e6 + t.tv_nsec / 1e3;
}
static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b; return x < y ? -1 : x > y;
}
/* Whether FILE holds exactly "VALUE\n". */
static int holds(const char *file, int value) {
    char want[32], got[64];
    int n = snprintf(want, sizeof want, "%d\n", value);
    int fd = open(file, O_RDONLY);
    if (fd < 0) return 0;
    ssize_t r = read(fd, got, sizeof got);
    close(fd);
    return r == n && memcmp(want, got, n) == 0;
}
static void set(DBusConnection *c, const char *path, const char *name, dbus_int32_t value) {
    DBusMessage *m = dbus_message_new_method_call("org.propbus.PropBus1", path, "org.freedesktop.DBus.Properties", "Set");
    const char *iface = "org.propbus.PropBus1.Values";
    DBusMessageIter it, v;
    dbus_message_iter_init_append(m, &it);
    dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &iface);
    dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &name);
    dbus_message_iter_open_container(&it, DBUS_TYPE_VARIANT, "i", &v);
    dbus_message_iter_append_basic(&v, DBUS_TYPE_INT32, &value);
    dbus_message_iter_close_container(&it, &v);
    DBusError err; dbus_error_init(&err);
    DBusMessage *reply = dbus_connection_send_with_reply_and_block(c, m, 5000, &err);
    dbus_message_unref(m);
    if (!reply) { fprintf(stderr, "Set: %s\n", err.message); exit(1); }
    dbus_message_unref(reply);
}
int main(int argc, char **argv) {
    if (argc != 6) { fprintf(stderr, "usage: %s ADDR GROUP-PATH NAME FILE N\n", argv[0]); return 64; }
    const char *path = argv[2], *name = argv[3], *file = argv[4];
    int n = atoi(argv[5]), warmup = 20;
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", file);
    int watch = inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
    if (watch < 0 || inotify_add_watch(watch, dirname(dir), IN_MOVED_TO | IN_CLOSE_WRITE) < 0) { perror("inotify"); return 1; }
    DBusError err; dbus_error_init(&err);
    DBusConnection *c = dbus_connection_open_private(argv[1], &err);
    if (!c || !dbus_bus_register(c, &err)) { fprintf(stderr, "%s\n", err.message); return 1; }
    double *lat = calloc(n, sizeof *lat);
    char events[8192];
    for (int i = 0; i < warmup + n; i++) {
        int value = 100000 + i;
        double start = now_us();
        set(c, path, name, value);
        while (!holds(file, value)) {
            struct pollfd p = { .fd = watch, .events = POLLIN };
            if (poll(&p, 1, 5000) <= 0) { fprintf(stderr, "%s never held %d\n", file, value); return 1; }
            while (read(watch, events, sizeof events) > 0) {}
        }
        if (i >= warmup) lat[i - warmup] = now_us() - start;
    }
    qsort(lat, n, sizeof *lat, cmp);
    printf("%.1f %.1f %.1f %d\n", lat[n / 2], lat[(int)(n * 0.99)], lat[n - 1], n);
    return 0;
}
