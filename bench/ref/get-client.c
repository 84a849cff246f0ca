/* Synchronous Properties.Get round-trip client.
 *
 *   get-client ADDRESS BUS_NAME OBJECT_PATH INTERFACE PROPERTY CALLS [WARMUP [WINDOW]]
 *
 * Makes WARMUP (default 1000) untimed calls, then CALLS timed calls with
 * dbus_connection_send_with_reply_and_block, one at a time. With WINDOW > 1 (default 1) the
 * timed calls are pipelined instead: up to WINDOW requests are in flight, and each reply lets
 * the next request go. Prints the mean wall-clock nanoseconds per call on stdout. Any error reply
 * aborts with exit status 1.
 */
#include <dbus/dbus.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static const char *dest, *path, *iface, *prop;

/* A fresh request each time, as a real client would send (a sent message keeps its serial). */
static DBusMessage *new_request(void)
{
    DBusMessage *req = dbus_message_new_method_call(dest, path, DBUS_INTERFACE_PROPERTIES, "Get");
    if (!req || !dbus_message_append_args(req, DBUS_TYPE_STRING, &iface, DBUS_TYPE_STRING, &prop,
                                          DBUS_TYPE_INVALID)) {
        fprintf(stderr, "get-client: out of memory\n");
        exit(1);
    }
    return req;
}

static void check_reply(DBusMessage *reply)
{
    if (dbus_message_get_type(reply) == DBUS_MESSAGE_TYPE_ERROR) {
        const char *text = "";
        dbus_message_get_args(reply, NULL, DBUS_TYPE_STRING, &text, DBUS_TYPE_INVALID);
        fprintf(stderr, "get-client: Get(%s, %s) failed: %s: %s\n", iface, prop, dbus_message_get_error_name(reply), text);
        exit(1);
    }
    DBusMessageIter it;
    if (!dbus_message_iter_init(reply, &it) || dbus_message_iter_get_arg_type(&it) != DBUS_TYPE_VARIANT) {
        fprintf(stderr, "get-client: reply is not a variant (signature '%s')\n", dbus_message_get_signature(reply));
        exit(1);
    }
}

static void call_once(DBusConnection *conn)
{
    DBusMessage *req = new_request();
    DBusError err;
    dbus_error_init(&err);
    DBusMessage *reply = dbus_connection_send_with_reply_and_block(conn, req, 5000, &err);
    if (!reply) {
        fprintf(stderr, "get-client: Get(%s, %s) failed: %s: %s\n", iface, prop, err.name, err.message);
        exit(1);
    }
    check_reply(reply);
    dbus_message_unref(reply);
    dbus_message_unref(req);
}

/* CALLS requests with up to WINDOW in flight; replies are matched by count, not serial, since
 * nothing else is sent on this connection. */
static void call_pipelined(DBusConnection *conn, long calls, long window)
{
    long sent = 0, received = 0;
    while (received < calls) {
        while (sent < calls && sent - received < window) {
            DBusMessage *req = new_request();
            if (!dbus_connection_send(conn, req, NULL)) { fprintf(stderr, "get-client: out of memory\n"); exit(1); }
            dbus_message_unref(req);
            sent++;
        }
        if (!dbus_connection_read_write(conn, 5000)) { fprintf(stderr, "get-client: disconnected\n"); exit(1); }
        DBusMessage *m;
        while ((m = dbus_connection_pop_message(conn))) {
            int type = dbus_message_get_type(m);
            if (type == DBUS_MESSAGE_TYPE_METHOD_RETURN || type == DBUS_MESSAGE_TYPE_ERROR) {
                check_reply(m);
                received++;
            }
            dbus_message_unref(m);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 7 || argc > 9) {
        fprintf(stderr, "usage: %s ADDRESS BUS_NAME OBJECT_PATH INTERFACE PROPERTY CALLS [WARMUP [WINDOW]]\n", argv[0]);
        return 2;
    }
    const char *address = argv[1];
    dest = argv[2];
    path = argv[3];
    iface = argv[4];
    prop = argv[5];
    long calls = atol(argv[6]), warmup = argc > 7 ? atol(argv[7]) : 1000, window = argc > 8 ? atol(argv[8]) : 1;
    if (calls <= 0 || warmup < 0 || window <= 0) {
        fprintf(stderr, "get-client: CALLS and WINDOW must be > 0 and WARMUP >= 0\n");
        return 2;
    }

    DBusError err;
    dbus_error_init(&err);
    DBusConnection *conn = dbus_connection_open_private(address, &err);
    if (!conn || !dbus_bus_register(conn, &err)) {
        fprintf(stderr, "get-client: cannot connect to %s: %s\n", address, err.message);
        return 1;
    }

    for (long i = 0; i < warmup; i++)
        call_once(conn);

    struct timespec t0, t1;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    if (window > 1)
        call_pipelined(conn, calls, window);
    else
        for (long i = 0; i < calls; i++)
            call_once(conn);
    clock_gettime(CLOCK_MONOTONIC, &t1);

    double ns = (t1.tv_sec - t0.tv_sec) * 1e9 + (t1.tv_nsec - t0.tv_nsec);
    printf("%.0f\n", ns / (double)calls);

    dbus_connection_close(conn);
    dbus_connection_unref(conn);
    return 0;
}
