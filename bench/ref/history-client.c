/* How long propbusd takes to answer a history query, measured by libdbus alone (no Python
 * objects per value: python-dbus spent most of a 100-row reply's time decoding it).
 *
 *   history-client ADDRESS KEY CALLS [latest|since NS]
 *
 * Calls Manager.ListHistory(KEY, 0, 0, filter) CALLS times, one after the other, each timed
 * from send to reply (the reply's rows counted, not decoded), and prints
 * "ROWS rows; median M ms, p99 P ms, worst W ms of CALLS". `latest`: filter {latest: true};
 * `since NS`: filter {since_time: NS}. Any error reply aborts with exit status 1.
 */
#include <dbus/dbus.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static int compare(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static DBusMessage *request(const char *key, const char *mode, dbus_int64_t since)
{
    DBusMessage *m = dbus_message_new_method_call("org.propbus.PropBus1", "/org/propbus/PropBus1",
                                                  "org.propbus.PropBus1.Manager", "ListHistory");
    dbus_uint64_t after = 0;
    dbus_uint32_t limit = 0;
    DBusMessageIter it, dict, entry, var;
    dbus_message_iter_init_append(m, &it);
    dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &key);
    dbus_message_iter_append_basic(&it, DBUS_TYPE_UINT64, &after);
    dbus_message_iter_append_basic(&it, DBUS_TYPE_UINT32, &limit);
    dbus_message_iter_open_container(&it, DBUS_TYPE_ARRAY, "{sv}", &dict);
    if (mode) {
        const char *name = strcmp(mode, "latest") == 0 ? "latest" : "since_time";
        dbus_message_iter_open_container(&dict, DBUS_TYPE_DICT_ENTRY, NULL, &entry);
        dbus_message_iter_append_basic(&entry, DBUS_TYPE_STRING, &name);
        if (strcmp(mode, "latest") == 0) {
            dbus_bool_t yes = TRUE;
            dbus_message_iter_open_container(&entry, DBUS_TYPE_VARIANT, "b", &var);
            dbus_message_iter_append_basic(&var, DBUS_TYPE_BOOLEAN, &yes);
        } else {
            dbus_message_iter_open_container(&entry, DBUS_TYPE_VARIANT, "x", &var);
            dbus_message_iter_append_basic(&var, DBUS_TYPE_INT64, &since);
        }
        dbus_message_iter_close_container(&entry, &var);
        dbus_message_iter_close_container(&dict, &entry);
    }
    dbus_message_iter_close_container(&it, &dict);
    return m;
}

int main(int argc, char **argv)
{
    if (argc < 4) {
        fprintf(stderr, "usage: history-client ADDRESS KEY CALLS [latest|since NS]\n");
        return 64;
    }
    const char *mode = argc > 4 ? argv[4] : NULL;
    dbus_int64_t since = argc > 5 ? atoll(argv[5]) : 0;
    int calls = atoi(argv[3]);
    DBusError err;
    dbus_error_init(&err);
    DBusConnection *conn = dbus_connection_open_private(argv[1], &err);
    if (!conn || !dbus_bus_register(conn, &err)) {
        fprintf(stderr, "history-client: cannot connect: %s\n", err.message ? err.message : "");
        return 1;
    }
    double *times = calloc(calls, sizeof *times);
    int rows = 0;
    for (int i = 0; i < calls; i++) {
        DBusMessage *m = request(argv[2], mode, since);
        double start = now();
        DBusMessage *reply = dbus_connection_send_with_reply_and_block(conn, m, 60000, &err);
        times[i] = (now() - start) * 1000;
        dbus_message_unref(m);
        if (!reply) {
            fprintf(stderr, "history-client: ListHistory: %s: %s\n", err.name, err.message);
            return 1;
        }
        DBusMessageIter it, array;
        dbus_message_iter_init(reply, &it);
        dbus_message_iter_recurse(&it, &array);
        rows = 0;
        while (dbus_message_iter_get_arg_type(&array) != DBUS_TYPE_INVALID) {
            rows++;
            dbus_message_iter_next(&array);
        }
        dbus_message_unref(reply);
    }
    qsort(times, calls, sizeof *times, compare);
    printf("%d rows; median %.2f ms, p99 %.2f ms, worst %.2f ms of %d\n", rows, times[calls / 2],
           times[(int)(calls * 0.99) < calls ? (int)(calls * 0.99) : calls - 1], times[calls - 1], calls);
    return 0;
}
