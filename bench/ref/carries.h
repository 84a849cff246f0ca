/* Shared by the bench's libdbus clients (bind-latency.c, fleet-latency.c): recognising the
   PropertiesChanged that carries the value a client is waiting for. */
#ifndef PROPBUS_BENCH_CARRIES_H
#define PROPBUS_BENCH_CARRIES_H
#include <dbus/dbus.h>
#include <string.h>

/* Whether msg is PropertiesChanged on path carrying name = want. */
static int carries(DBusMessage *msg, const char *path, const char *name, dbus_int32_t want) {
    if (!dbus_message_is_signal(msg, "org.freedesktop.DBus.Properties", "PropertiesChanged")) return 0;
    if (strcmp(dbus_message_get_path(msg), path) != 0) return 0;
    DBusMessageIter it, dict, entry, var;
    dbus_message_iter_init(msg, &it);
    dbus_message_iter_next(&it);
    dbus_message_iter_recurse(&it, &dict);
    while (dbus_message_iter_get_arg_type(&dict) == DBUS_TYPE_DICT_ENTRY) {
        const char *key;
        dbus_message_iter_recurse(&dict, &entry);
        dbus_message_iter_get_basic(&entry, &key);
        dbus_message_iter_next(&entry);
        dbus_message_iter_recurse(&entry, &var);
        if (strcmp(key, name) == 0 && dbus_message_iter_get_arg_type(&var) == DBUS_TYPE_INT32) {
            dbus_int32_t v;
            dbus_message_iter_get_basic(&var, &v);
            return v == want;
        }
        dbus_message_iter_next(&dict);
    }
    return 0;
}

#endif
