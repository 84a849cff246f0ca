/* Time one method call, one at a time.
 *
 *   call-client ADDRESS BUS_NAME OBJECT_PATH INTERFACE METHOD CALLS [STRING_ARG]
 *
 * Makes one untimed call, then CALLS timed calls with dbus_connection_send_with_reply_and_block
 * (with STRING_ARG as the only argument when given). Prints "p50_us p99_us max_us CALLS", then a
 * second line with the size of the last reply in bytes. Any error reply aborts with status 1.
 * With CALL_CLIENT_SAVE=FILE in the environment, the last reply as received (dbus_message_marshal:
 * header and body) is written to FILE, for bench/ref/ref-service.c to answer with the same bytes.
 */
#include "bus.h"
#include "latency.h"

int main(int argc, char **argv)
{
    if (argc < 7 || argc > 8) {
        fprintf(stderr, "usage: %s ADDRESS BUS_NAME OBJECT_PATH INTERFACE METHOD CALLS [STRING_ARG]\n", argv[0]);
        return 2;
    }
    int calls = atoi(argv[6]);
    if (calls <= 0) { fprintf(stderr, "call-client: CALLS must be > 0\n"); return 2; }
    const char *arg = argc > 7 ? argv[7] : NULL;
    const char *save = getenv("CALL_CLIENT_SAVE");
    DBusConnection *conn = bench_connect("call-client", argv[1]);
    long long *lat = calloc((size_t)calls, sizeof *lat);
    unsigned long bytes = 0;
    for (int i = -1; i < calls; i++) {
        DBusMessage *req = dbus_message_new_method_call(argv[2], argv[3], argv[4], argv[5]);
        if (!req || (arg && !dbus_message_append_args(req, DBUS_TYPE_STRING, &arg, DBUS_TYPE_INVALID))) {
            fprintf(stderr, "call-client: out of memory\n");
            return 1;
        }
        DBusError err;
        dbus_error_init(&err);
        long long t0 = now_ns();
        DBusMessage *reply = dbus_connection_send_with_reply_and_block(conn, req, 120000, &err);
        if (i >= 0) lat[i] = now_ns() - t0;
        if (!reply) bench_die("call-client", argv[5], &err);
        char *wire;
        int length;
        if (dbus_message_marshal(reply, &wire, &length)) {
            bytes = (unsigned long)length;
            FILE *out;
            if (save && i == calls - 1 && (!(out = fopen(save, "wb")) || fwrite(wire, 1, (size_t)length, out) != (size_t)length || fclose(out) != 0)) {
                perror(save);
                return 1;
            }
            dbus_free(wire);
        }
        dbus_message_unref(reply);
        dbus_message_unref(req);
    }
    report_latencies(lat, calls);
    printf("%lu\n", bytes);
    return 0;
}
