/* The plain libdbus observer (and the writer) of bench/client-latency.sh.
 *
 *   watch-latency watch ADDRESS PATH NAME COUNT
 *       Subscribes to org.propbus.PropBus1's PropertiesChanged on PATH, prints "ready" once the
 *       bus confirmed the match, then takes COUNT changes of the int32 property NAME and
 *       prints "VALUE NANOSECONDS" for each (CLOCK_MONOTONIC when the signal was read), after
 *       the last one, so printing costs nothing while it measures.
 *   watch-latency write ADDRESS PATH NAME COUNT PAUSE_US
 *       Sets NAME to 1..COUNT (Properties.Set, waiting for each reply), PAUSE_US apart, and
 *       prints "VALUE NANOSECONDS" (just before each Set) at the end.
 */
#include <string.h>
#include <unistd.h>
#include "bus.h"
#include "latency.h"

#define PROPBUS "org.propbus.PropBus1"

/* The int32 of NAME in a PropertiesChanged of org.propbus.PropBus1.Values, or 0. */
static int changed_value(DBusMessage *msg, const char *name)
{
    DBusMessageIter args, dict, entry, variant;
    const char *interface;
    if (!dbus_message_iter_init(msg, &args) || dbus_message_iter_get_arg_type(&args) != DBUS_TYPE_STRING) return 0;
    dbus_message_iter_get_basic(&args, &interface);
    if (strcmp(interface, "org.propbus.PropBus1.Values") != 0 || !dbus_message_iter_next(&args)) return 0;
    dbus_message_iter_recurse(&args, &dict);
    while (dbus_message_iter_get_arg_type(&dict) == DBUS_TYPE_DICT_ENTRY) {
        const char *key;
        dbus_message_iter_recurse(&dict, &entry);
        dbus_message_iter_get_basic(&entry, &key);
        dbus_message_iter_next(&entry);
        dbus_message_iter_recurse(&entry, &variant);
        if (strcmp(key, name) == 0 && dbus_message_iter_get_arg_type(&variant) == DBUS_TYPE_INT32) {
            dbus_int32_t value;
            dbus_message_iter_get_basic(&variant, &value);
            return value;
        }
        dbus_message_iter_next(&dict);
    }
    return 0;
}

static void watch(const char *address, const char *path, const char *name, int count)
{
    DBusError err;
    dbus_error_init(&err);
    DBusConnection *conn = bench_connect("watch-latency", address);
    char rule[512];
    snprintf(rule, sizeof rule, "type='signal',sender='" PROPBUS "',path='%s',"
             "interface='org.freedesktop.DBus.Properties',member='PropertiesChanged'", path);
    dbus_bus_add_match(conn, rule, &err); /* blocking: confirmed by the bus when it returns */
    if (dbus_error_is_set(&err)) bench_die("watch-latency", "AddMatch", &err);
    printf("ready\n");
    fflush(stdout);
    int *values = calloc((size_t)count, sizeof *values);
    long long *times = calloc((size_t)count, sizeof *times);
    int seen = 0;
    while (seen < count && dbus_connection_read_write(conn, -1)) {
        DBusMessage *msg;
        while (seen < count && (msg = dbus_connection_pop_message(conn))) {
            if (dbus_message_is_signal(msg, "org.freedesktop.DBus.Properties", "PropertiesChanged")) {
                long long at = now_ns();
                int value = changed_value(msg, name);
                if (value > 0) { values[seen] = value; times[seen] = at; seen++; }
            }
            dbus_message_unref(msg);
        }
    }
    for (int i = 0; i < seen; i++) printf("%d %lld\n", values[i], times[i]);
}

static void write_values(const char *address, const char *path, const char *name, int count, int pause_us)
{
    DBusError err;
    dbus_error_init(&err);
    DBusConnection *conn = bench_connect("watch-latency", address);
    long long *times = calloc((size_t)count, sizeof *times);
    const char *interface = "org.propbus.PropBus1.Values";
    for (int value = 1; value <= count; value++) {
        DBusMessage *call = dbus_message_new_method_call(PROPBUS, path, "org.freedesktop.DBus.Properties", "Set");
        DBusMessageIter args, variant;
        dbus_message_iter_init_append(call, &args);
        dbus_message_iter_append_basic(&args, DBUS_TYPE_STRING, &interface);
        dbus_message_iter_append_basic(&args, DBUS_TYPE_STRING, &name);
        dbus_message_iter_open_container(&args, DBUS_TYPE_VARIANT, "i", &variant);
        dbus_int32_t v = value;
        dbus_message_iter_append_basic(&variant, DBUS_TYPE_INT32, &v);
        dbus_message_iter_close_container(&args, &variant);
        times[value - 1] = now_ns();
        DBusMessage *reply = dbus_connection_send_with_reply_and_block(conn, call, 5000, &err);
        if (!reply) bench_die("watch-latency", "Set", &err);
        dbus_message_unref(reply);
        dbus_message_unref(call);
        usleep((useconds_t)pause_us);
    }
    for (int i = 0; i < count; i++) printf("%d %lld\n", i + 1, times[i]);
}

int main(int argc, char **argv)
{
    if (argc == 6 && strcmp(argv[1], "watch") == 0) {
        watch(argv[2], argv[3], argv[4], atoi(argv[5]));
    } else if (argc == 7 && strcmp(argv[1], "write") == 0) {
        write_values(argv[2], argv[3], argv[4], atoi(argv[5]), atoi(argv[6]));
    } else {
        fprintf(stderr, "usage: watch-latency watch ADDRESS PATH NAME COUNT | write ADDRESS PATH NAME COUNT PAUSE_US\n");
        return 64;
    }
    return 0;
}
