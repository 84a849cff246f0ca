/* Latency of a daemon-side binding: Properties.Set on one key, until the PropertiesChanged of
 * the key bound to it arrives. Prints one line: "p50_us p99_us max_us count".
 *
 * usage: bind-latency ADDRESS SOURCE_PATH SOURCE_NAME TARGET_PATH TARGET_NAME N
 * Both keys must be of type i. Each iteration sets the source to a fresh value and waits for a
 * PropertiesChanged on the target carrying the same value (identity binding). */
#include <dbus/dbus.h>
#include "latency.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "carries.h"

int main(int argc, char **argv) {
    if (argc < 7) {
        fprintf(stderr, "usage: %s ADDRESS SOURCE_PATH SOURCE_NAME TARGET_PATH TARGET_NAME N\n", argv[0]);
        return 64;
    }
    const char *spath = argv[2], *sname = argv[3], *tpath = argv[4], *tname = argv[5];
    int n = atoi(argv[6]);
    DBusError err;
    dbus_error_init(&err);
    DBusConnection *c = dbus_connection_open_private(argv[1], &err);
    if (!c || !dbus_bus_register(c, &err)) { fprintf(stderr, "connect: %s\n", err.message); return 69; }
    char rule[512];
    snprintf(rule, sizeof rule, "type='signal',sender='org.propbus.PropBus1',path='%s',interface='org.freedesktop.DBus.Properties',member='PropertiesChanged'", tpath);
    dbus_bus_add_match(c, rule, &err);
    if (dbus_error_is_set(&err)) { fprintf(stderr, "AddMatch: %s\n", err.message); return 1; }
    long long *lat = calloc((size_t)n, sizeof *lat);
    const char *iface = "org.propbus.PropBus1.Values";
    for (int i = 0; i < n; i++) {
        dbus_int32_t value = 1000 + i;
        DBusMessage *m = dbus_message_new_method_call("org.propbus.PropBus1", spath, "org.freedesktop.DBus.Properties", "Set");
        DBusMessageIter it, var;
        dbus_message_iter_init_append(m, &it);
        dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &iface);
        dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &sname);
        dbus_message_iter_open_container(&it, DBUS_TYPE_VARIANT, "i", &var);
        dbus_message_iter_append_basic(&var, DBUS_TYPE_INT32, &value);
        dbus_message_iter_close_container(&it, &var);
        long long start = now_ns();
        dbus_connection_send(c, m, NULL);
        dbus_message_unref(m);
        int seen = 0;
        while (!seen) {
            if (!dbus_connection_read_write(c, 5000)) { fprintf(stderr, "disconnected\n"); return 1; }
            DBusMessage *in;
            while ((in = dbus_connection_pop_message(c))) {
                if (dbus_message_get_type(in) == DBUS_MESSAGE_TYPE_ERROR) {
                    fprintf(stderr, "error: %s\n", dbus_message_get_error_name(in));
                    return 1;
                }
                if (carries(in, tpath, tname, value)) { seen = 1; lat[i] = now_ns() - start; }
                dbus_message_unref(in);
            }
        }
    }
    report_latencies(lat, n);
    return 0;
}
