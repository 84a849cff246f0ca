/* Minimal libdbus reference service for the Properties.Get round-trip bench.
 *
 *   ref-service ADDRESS [BUS_NAME [STORE|- [LISTING]]]     (BUS_NAME defaults to org.propbus.Ref1)
 *
 * Owns BUS_NAME on the bus at ADDRESS and exports /org/propbus/PropBus1/bench, answering
 * org.freedesktop.DBus.Properties.Get("org.propbus.PropBus1.Values", "x") with <int32 7>.
 * Everything else gets an error reply. Prints "ready" on stdout once the name is owned.
 *
 * With STORE (a propbusd SQLite store holding int32 values, as bench/all.sh generates), it
 * first loads every stored value, as propbusd does at start, and answers Get for each key
 * GROUP.NAME on GROUP's object path too: the least a C service serving those keys must do.
 *
 * With LISTING (a reply of propbusd's saved by `CALL_CLIENT_SAVE=FILE bench/build/call-client`,
 * header and body as received), it answers org.propbus.PropBus1.Manager on the root path with
 * that reply's body, byte for byte, whatever the argument (the floor for a listing):
 *   ListProperties          a copy of the message made from LISTING once at start
 *                           (dbus_message_copy: a memcpy, no check), given the caller's
 *                           destination and reply serial: the least work any libdbus service
 *                           can do to send these bytes;
 *   ListPropertiesChecked   what propbusd does: the reply's header as libdbus makes it, the body
 *                           appended, made into a message by dbus_message_demarshal, which
 *                           checks the body (libdbus has no public call that makes a message from
 *                           bytes without checking them, other than copying a message).
 */
#include <dbus/dbus.h>
#include <sqlite3.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define ROOT_PATH "/org/propbus/PropBus1"

#define OBJ_PATH "/org/propbus/PropBus1/bench"
#define VALUES_IFACE "org.propbus.PropBus1.Values"
#define MANAGER_IFACE "org.propbus.PropBus1.Manager"

static void die_oom(void)
{
    fprintf(stderr, "ref-service: out of memory\n");
    exit(1);
}

/* The saved listing: the message made from it once, and its body's bytes and signature. */
static DBusMessage *listing;
static char *listing_body;
static uint32_t listing_body_length;
static char listing_signature[256];

static void load_listing(const char *file)
{
    FILE *in = fopen(file, "rb");
    long size;
    char *wire;
    if (!in || fseek(in, 0, SEEK_END) != 0 || (size = ftell(in)) < 16 || fseek(in, 0, SEEK_SET) != 0 ||
        !(wire = malloc((size_t)size)) || fread(wire, 1, (size_t)size, in) != (size_t)size) {
        fprintf(stderr, "ref-service: cannot read the listing %s\n", file);
        exit(1);
    }
    fclose(in);
    DBusError err;
    dbus_error_init(&err);
    /* Checked once here, as a received message is. */
    if (!(listing = dbus_message_demarshal(wire, (int)size, &err))) {
        fprintf(stderr, "ref-service: %s is not a D-Bus message: %s\n", file, err.message);
        exit(1);
    }
    if (wire[0] != 'l') { fprintf(stderr, "ref-service: %s is not little-endian\n", file); exit(1); }
    memcpy(&listing_body_length, wire + 4, 4);
    listing_body = malloc(listing_body_length);
    if (!listing_body) die_oom();
    memcpy(listing_body, wire + size - listing_body_length, listing_body_length);
    snprintf(listing_signature, sizeof listing_signature, "%s", dbus_message_get_signature(listing));
    free(wire);
}

/* The floor: a copy of the message made at start (no check of its 2 MB), addressed to the caller. */
static DBusMessage *listing_copy(DBusMessage *call)
{
    DBusMessage *reply = dbus_message_copy(listing);
    if (!reply || !dbus_message_set_reply_serial(reply, dbus_message_get_serial(call)) ||
        !dbus_message_set_destination(reply, dbus_message_get_sender(call)) ||
        !dbus_message_set_sender(reply, NULL))
        die_oom();
    return reply;
}

/* Writes into a buffer allocated large enough beforehand. */
static void append(char *buffer, size_t *length, const void *bytes, size_t count)
{
    memcpy(buffer + *length, bytes, count);
    *length += count;
}

static void pad(char *buffer, size_t *length, size_t alignment)
{
    while (*length % alignment) buffer[(*length)++] = 0;
}

/* propbusd's way (DBus/Connection/Message+Body.swift): libdbus's header for the reply, a
 * SIGNATURE field added, the body after it, all made into a message by dbus_message_demarshal. */
static DBusMessage *listing_checked(DBusMessage *call)
{
    DBusMessage *empty = dbus_message_new_method_return(call);
    char *header;
    int header_length;
    if (!empty) die_oom();
    dbus_message_set_serial(empty, 1);
    if (!dbus_message_marshal(empty, &header, &header_length)) die_oom();
    dbus_message_unref(empty);
    uint32_t fields;
    memcpy(&fields, header + 12, 4);
    size_t signature_length = strlen(listing_signature);
    /* The header, up to 7 bytes of padding, the field (5 bytes and the signature with its nul),
     * up to 7 more, the body. */
    size_t capacity = 16 + fields + 7 + 5 + signature_length + 1 + 7 + listing_body_length;
    char *wire = malloc(capacity);
    size_t length = 0;
    if (!wire) die_oom();
    append(wire, &length, header, 16 + fields);
    dbus_free(header);
    /* The SIGNATURE field (code 8): a struct (yv) whose variant holds the signature as a `g`. */
    pad(wire, &length, 8);
    unsigned char code = 8, g_length = 1, value_length = (unsigned char)signature_length;
    append(wire, &length, &code, 1);
    append(wire, &length, &g_length, 1);
    append(wire, &length, "g", 2);
    append(wire, &length, &value_length, 1);
    append(wire, &length, listing_signature, signature_length + 1);
    fields = (uint32_t)(length - 16);
    memcpy(wire + 12, &fields, 4);
    pad(wire, &length, 8);
    memcpy(wire + 4, &listing_body_length, 4);
    append(wire, &length, listing_body, listing_body_length);
    DBusError err;
    dbus_error_init(&err);
    DBusMessage *reply = dbus_message_demarshal(wire, (int)length, &err);
    free(wire);
    if (!reply) {
        fprintf(stderr, "ref-service: the listing made no message: %s\n", err.message);
        exit(1);
    }
    dbus_message_set_serial(reply, 0);  /* the real one is given when it is sent */
    return reply;
}

/* The loaded store: "GROUP/NAME" (the object path's tail, a slash, the property) → int32. */
struct entry { char *id; dbus_int32_t value; };
static struct entry *entries;
static size_t entry_count;

static int compare_entries(const void *a, const void *b)
{
    return strcmp(((const struct entry *)a)->id, ((const struct entry *)b)->id);
}

/* Reads every stored value; the store's encoding of an int32 is 01 01 'i' then 4 bytes LE. */
static void load_store(const char *file)
{
    sqlite3 *db;
    sqlite3_stmt *rows;
    if (sqlite3_open_v2(file, &db, SQLITE_OPEN_READONLY, NULL) != SQLITE_OK ||
        sqlite3_prepare_v2(db, "SELECT key, value FROM stored_values", -1, &rows, NULL) != SQLITE_OK) {
        fprintf(stderr, "ref-service: cannot read %s: %s\n", file, sqlite3_errmsg(db));
        exit(1);
    }
    size_t capacity = 1024;
    entries = malloc(capacity * sizeof *entries);
    while (sqlite3_step(rows) == SQLITE_ROW) {
        const char *key = (const char *)sqlite3_column_text(rows, 0);
        const unsigned char *blob = sqlite3_column_blob(rows, 1);
        int size = sqlite3_column_bytes(rows, 1);
        const char *dot = strrchr(key, '.');
        if (!dot || size != 7 || blob[0] != 1 || blob[1] != 1 || blob[2] != 'i') {
            fprintf(stderr, "ref-service: %s: %s is not an int32 GROUP.NAME value\n", file, key);
            exit(1);
        }
        if (entry_count == capacity) entries = realloc(entries, (capacity *= 2) * sizeof *entries);
        char *id = strdup(key);
        for (char *c = id; c < id + (dot - key); c++) if (*c == '.') *c = '/';
        id[dot - key] = '/';
        entries[entry_count].id = id;
        entries[entry_count].value = (dbus_int32_t)((uint32_t)blob[3] | (uint32_t)blob[4] << 8 |
                                                    (uint32_t)blob[5] << 16 | (uint32_t)blob[6] << 24);
        entry_count++;
    }
    sqlite3_finalize(rows);
    sqlite3_close(db);
    qsort(entries, entry_count, sizeof *entries, compare_entries);
}

/* The stored value of PROP on the object at PATH, if there is one. */
static const struct entry *lookup(const char *path, const char *prop)
{
    char id[512];
    size_t root = strlen(ROOT_PATH);
    if (strncmp(path, ROOT_PATH "/", root + 1) != 0 ||
        (size_t)snprintf(id, sizeof id, "%s/%s", path + root + 1, prop) >= sizeof id)
        return NULL;
    struct entry probe = { .id = id };
    return bsearch(&probe, entries, entry_count, sizeof *entries, compare_entries);
}

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
    const struct entry *stored = NULL;
    int is_x = strcmp(dbus_message_get_path(msg), OBJ_PATH) == 0 && strcmp(prop, "x") == 0;
    if (strcmp(iface, VALUES_IFACE) != 0 || (!is_x && !(stored = lookup(dbus_message_get_path(msg), prop))))
        return dbus_message_new_error_printf(msg, DBUS_ERROR_UNKNOWN_PROPERTY,
                                             "no property %s.%s", iface, prop);

    DBusMessage *reply = dbus_message_new_method_return(msg);
    DBusMessageIter it, var;
    dbus_int32_t x = stored ? stored->value : 7;
    dbus_message_iter_init_append(reply, &it);
    if (!dbus_message_iter_open_container(&it, DBUS_TYPE_VARIANT, DBUS_TYPE_INT32_AS_STRING, &var) ||
        !dbus_message_iter_append_basic(&var, DBUS_TYPE_INT32, &x) ||
        !dbus_message_iter_close_container(&it, &var))
        die_oom();
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
    else if (listing && dbus_message_is_method_call(msg, MANAGER_IFACE, "ListProperties"))
        reply = listing_copy(msg);
    else if (listing && dbus_message_is_method_call(msg, MANAGER_IFACE, "ListPropertiesChecked"))
        reply = listing_checked(msg);
    else
        reply = dbus_message_new_error_printf(msg, DBUS_ERROR_UNKNOWN_METHOD, "unknown method %s.%s",
                                              dbus_message_get_interface(msg) ? dbus_message_get_interface(msg) : "",
                                              dbus_message_get_member(msg));
    if (!reply || !dbus_connection_send(conn, reply, NULL))
        die_oom();
    dbus_message_unref(reply);
    return DBUS_HANDLER_RESULT_HANDLED;
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 5) {
        fprintf(stderr, "usage: %s ADDRESS [BUS_NAME [STORE|- [LISTING]]]\n", argv[0]);
        return 2;
    }
    const char *name = argc > 2 ? argv[2] : "org.propbus.Ref1";
    if (argc > 3 && strcmp(argv[3], "-") != 0)
        load_store(argv[3]);
    if (argc > 4)
        load_listing(argv[4]);
    DBusError err;
    dbus_error_init(&err);

    DBusConnection *conn = dbus_connection_open_private(argv[1], &err);
    if (!conn || !dbus_bus_register(conn, &err)) {
        fprintf(stderr, "ref-service: cannot connect to %s: %s\n", argv[1], err.message);
        return 1;
    }
    static const DBusObjectPathVTable vtable = { .message_function = on_message };
    /* A fallback below the root serves every group's path (and the bench object's). */
    if (!dbus_connection_register_fallback(conn, ROOT_PATH, &vtable, NULL)) {
        fprintf(stderr, "ref-service: cannot register %s\n", ROOT_PATH);
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
