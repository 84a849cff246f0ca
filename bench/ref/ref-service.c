/* Minimal libdbus reference service for the Properties.Get round-trip bench.
 *
 *   ref-service ADDRESS [BUS_NAME]      (BUS_NAME defaults to org.propbus.Ref1)
 *
 * Owns BUS_NAME on the bus at ADDRESS and exports /org/propbus/PropBus1/bench, answering
 * org.freedesktop.DBus.Properties.Get("org.propbus.PropBus1.Values", "x") with <int32 7>.
 * Everything else gets an error reply. Prints "ready" on stdout once the name is owned.
 */
#include <dbus/dbus.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define OBJ_PATH "/org/propbus/PropBus1/bench"
#define VALUES_IFACE "org.propbus.PropBus1.Values"

static DBusMessage *handle_get(DBusMessage *msg)
{
    const char *iface = NULL, *prop = NULL;
    DBusError err;
    dbus_error_init(&err);
    if (!dbus_message_get_args(msg, &err, DBUS_TYPE_STRING, &iface, DBUS_TYPE_STRING, &prop,
                               DBUS_TYPE_INVALID)) {
        DBusMessage *reply = dbus_message_new_error(msg, DBUS_ERROR_INVALID_ARGS, err.message);
        dbus_error_free(&err);
        return reply;
    }
    if (strcmp(iface, VALUES_IFACE) != 0 || strcmp(prop, "x") != 0)
        return dbus_message_new_error_printf(msg, DBUS_ERROR_UNKNOWN_PROPERTY,
                                             "no property %s.%s", iface, prop);

    DBusMessage *reply = dbus_message_new_method_return(msg);
    DBusMessageIter it, var;
    dbus_int32_t x = 7;
    dbus_message_iter_init_append(reply, &it);
    if (!dbus_message_iter_open_container(&it, DBUS_TYPE_VARIANT, DBUS_TYPE_INT32_AS_STRING, &var) ||
        !dbus_message_iter_append_basic(&var, DBUS_TYPE_INT32, &x) ||
        !dbus_message_iter_close_container(&it, &var)) {
        fprintf(stderr, "ref-service: out of memory\n");
        exit(1);
    }
    return reply;
}

static DBusHandlerResult on_message(DBusConnection *conn, DBusMessage *msg, void *data)
{
    (void)data;
    if (dbus_message_get_type(msg) != DBUS_MESSAGE_TYPE_METHOD_CALL)
        return DBUS_HANDLER_RESULT_NOT_YET_HANDLED;

    DBusMessage *reply;
    if (dbus_message_is_method_call(msg, DBUS_INTERFACE_PROPERTIES, "Get"))
        reply = handle_get(msg);
    else
        reply = dbus_message_new_error_printf(msg, DBUS_ERROR_UNKNOWN_METHOD, "unknown method %s.%s",
                                              dbus_message_get_interface(msg) ? dbus_message_get_interface(msg) : "",
                                              dbus_message_get_member(msg));
    if (!reply || !dbus_connection_send(conn, reply, NULL)) {
        fprintf(stderr, "ref-service: out of memory\n");
        exit(1);
    }
    dbus_message_unref(reply);
    return DBUS_HANDLER_RESULT_HANDLED;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: %s ADDRESS [BUS_NAME]\n", argv[0]);
        return 2;
    }
    const char *name = argc > 2 ? argv[2] : "org.propbus.Ref1";
    DBusError err;
    dbus_error_init(&err);

    DBusConnection *conn = dbus_connection_open_private(argv[1], &err);
    if (!conn || !dbus_bus_register(conn, &err)) {
        fprintf(stderr, "ref-service: cannot connect to %s: %s\n", argv[1], err.message);
        return 1;
    }
    static const DBusObjectPathVTable vtable = { .message_function = on_message };
    if (!dbus_connection_register_object_path(conn, OBJ_PATH, &vtable, NULL)) {
        fprintf(stderr, "ref-service: cannot register %s\n", OBJ_PATH);
        return 1;
    }
    int r = dbus_bus_request_name(conn, name, DBUS_NAME_FLAG_DO_NOT_QUEUE, &err);
    if (r != DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER) {
        fprintf(stderr, "ref-service: cannot own %s: %s\n", name, dbus_error_is_set(&err) ? err.message : "name taken");
        return 1;
    }
    printf("ready\n");
    fflush(stdout);

    while (dbus_connection_read_write_dispatch(conn, -1))
        ;
    return 0; /* bus went away */
}
