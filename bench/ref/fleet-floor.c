/* The floor for bench/fleet.sh: the least a fleet host can do for one fleet key, so that the bench
 * shows what any daemon that must use etcd's HTTP/1.1 JSON gateway, a bus and one watch per host
 * can reach on this machine. No store, no model, no threads: one poll loop over the bus and the
 * watch stream.
 *
 * usage: fleet-floor BUS_ADDRESS URL PREFIX KEY
 *        e.g. fleet-floor unix:path=/tmp/bus http://127.0.0.1:2379 /floor/ bench.x
 *
 * Owns org.propbus.PropBus1 on the bus and exports KEY as propbusd does: property NAME (the last
 * dot-separated part, type i) of org.propbus.PropBus1.Values on /org/propbus/PropBus1/GROUP (the
 * rest, dots as slashes). Only Properties.Get and Properties.Set.
 * - Set: the txn propbusd sends for one Set (compares on the mod_revision of PREFIX/defs/KEY and
 *   PREFIX/keys/KEY, a put of PREFIX/keys/KEY in ValueCodec bytes, gets of both on failure; a lost
 *   compare is retried with the revisions the failure branch read, at most 10 times), through one
 *   reused libcurl handle; the reply and PropertiesChanged go out once etcd answered. A Set of
 *   the value already held is answered at once, as propbusd does.
 * - One /v3/watch stream over PREFIX (libcurl multi, in the same poll as the bus): each put of
 *   PREFIX/keys/KEY newer than the revision held emits PropertiesChanged. Own writes are skipped
 *   by revision: the loop is blocked in the Set's txn until etcd answers, so the event of an own
 *   write is read after its revision is known.
 * Deletes, definitions other than the one created at start and everything under PREFIX/hosts
 * are ignored: the bench does not exercise them. The name is requested once the watch is
 * created, so its owner appearing means the host is ready. */
#include <curl/curl.h>
#include <dbus/dbus.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *values_interface = "org.propbus.PropBus1.Values";
static const char *properties_interface = "org.freedesktop.DBus.Properties";

static void die(const char *what, const char *detail) {
    fprintf(stderr, "fleet-floor: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
    exit(1);
}

/* MARK: base64 (etcd's gateway carries keys and values as base64 strings) */

static const char alphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

static void base64(const unsigned char *in, size_t n, char *out) {
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)in[i] << 16;
        if (i + 1 < n) v |= (unsigned)in[i + 1] << 8;
        if (i + 2 < n) v |= in[i + 2];
        out[o++] = alphabet[(v >> 18) & 63];
        out[o++] = alphabet[(v >> 12) & 63];
        out[o++] = i + 1 < n ? alphabet[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? alphabet[v & 63] : '=';
    }
    out[o] = 0;
}

/* Decodes base64 text up to the closing quote into out (at most cap bytes); the length, or -1. */
static int unbase64(const char *in, unsigned char *out, int cap) {
    unsigned v = 0;
    int bits = 0, n = 0;
    for (; *in && *in != '"' && *in != '='; in++) {
        const char *at = strchr(alphabet, *in);
        if (!at) return -1;
        v = (v << 6) | (unsigned)(at - alphabet);
        bits += 6;
        if (bits >= 8) {
            bits -= 8;
            if (n == cap) return -1;
            out[n++] = (unsigned char)(v >> bits);
        }
    }
    return n;
}

/* MARK: the one key */

static DBusConnection *bus;
static char object_path[256], property_name[128];
static char defs64[288], keys64[288]; /* base64 of at most 100 + 6 + 100 bytes */
static dbus_int32_t value;            /* the value held (the definition's default, 0, until set) */
static long long value_revision;      /* etcd's mod_revision of PREFIX/keys/KEY that value is */
static long long definition_revision; /* etcd's mod_revision of PREFIX/defs/KEY */

/* Env FLOOR_ATTRIBUTION=N (0-1024, default 0): each value carries N more bytes in propbusd's
 * attributed format (0xA7, the value's length as 4 little-endian bytes, the value, then N bytes
 * standing for the writer's a{sv}), so that etcd stores, answers and delivers what it does for
 * propbusd's values; the floor never reads them. */
static int attribution_bytes;

/* ValueCodec bytes of an i: format 1, signature "i" (length byte, text), little-endian int32;
 * with FLOOR_ATTRIBUTION, in the attributed format. */
static void encode_value(dbus_int32_t v, char *out64) {
    unsigned char bytes[5 + 7 + 1024] = {0};
    unsigned char *value = attribution_bytes ? bytes + 5 : bytes;
    value[0] = 1, value[1] = 1, value[2] = 'i';
    for (int i = 0; i < 4; i++) value[3 + i] = (unsigned char)((unsigned)v >> (8 * i));
    if (attribution_bytes) {
        bytes[0] = 0xA7, bytes[1] = 7;
        memset(bytes + 12, 'a', (size_t)attribution_bytes);
    }
    base64(bytes, attribution_bytes ? 12 + attribution_bytes : 7, out64);
}

/* The int32 in ValueCodec base64 text (bare or attributed); 0 when it is not an i. */
static int decode_value(const char *text64, dbus_int32_t *out) {
    unsigned char bytes[5 + 7 + 1024];
    int n = unbase64(text64, bytes, sizeof bytes);
    const unsigned char *value = bytes;
    if (n >= 12 && bytes[0] == 0xA7 && bytes[1] == 7 && !bytes[2] && !bytes[3] && !bytes[4]) value = bytes + 5, n = 7;
    if (n != 7 || value[0] != 1 || value[1] != 1 || value[2] != 'i') return 0;
    *out = (dbus_int32_t)((unsigned)value[3] | (unsigned)value[4] << 8 | (unsigned)value[5] << 16 | (unsigned)value[6] << 24);
    return 1;
}

/* The number after "name":" (etcd sends int64 as strings) between from and to, or 0. */
static long long number(const char *from, const char *to, const char *name) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":\"", name);
    const char *at = strstr(from, pattern);
    return at && (!to || at < to) ? atoll(at + strlen(pattern)) : 0;
}

/* The string after "name":" between from and to, or NULL. */
static const char *string_at(const char *from, const char *to, const char *name) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":\"", name);
    const char *at = strstr(from, pattern);
    return at && (!to || at < to) ? at + strlen(pattern) : NULL;
}

static int is_key(const char *text, const char *key64) {
    size_t n = strlen(key64);
    return text && strncmp(text, key64, n) == 0 && text[n] == '"';
}

static void emit_changed(void) {
    DBusMessage *signal = dbus_message_new_signal(object_path, properties_interface, "PropertiesChanged");
    DBusMessageIter it, dict, entry, variant, invalidated;
    const char *name = property_name;
    dbus_message_iter_init_append(signal, &it);
    dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &values_interface);
    dbus_message_iter_open_container(&it, DBUS_TYPE_ARRAY, "{sv}", &dict);
    dbus_message_iter_open_container(&dict, DBUS_TYPE_DICT_ENTRY, NULL, &entry);
    dbus_message_iter_append_basic(&entry, DBUS_TYPE_STRING, &name);
    dbus_message_iter_open_container(&entry, DBUS_TYPE_VARIANT, "i", &variant);
    dbus_message_iter_append_basic(&variant, DBUS_TYPE_INT32, &value);
    dbus_message_iter_close_container(&entry, &variant);
    dbus_message_iter_close_container(&dict, &entry);
    dbus_message_iter_close_container(&it, &dict);
    dbus_message_iter_open_container(&it, DBUS_TYPE_ARRAY, "s", &invalidated);
    dbus_message_iter_close_container(&it, &invalidated);
    dbus_connection_send(bus, signal, NULL);
    dbus_message_unref(signal);
}

/* One key-value of etcd's JSON (from its "key" to the next one): a newer put of the value key
 * takes the value and, if it differs, is announced; returns whether a signal went out. */
static int apply(const char *kv, const char *end, int announce) {
    const char *key = string_at(kv, end, "key");
    long long revision = number(kv, end, "mod_revision");
    if (is_key(key, defs64)) {
        if (revision > definition_revision) definition_revision = revision;
        return 0;
    }
    if (!is_key(key, keys64) || revision <= value_revision) return 0;
    dbus_int32_t v;
    const char *text = string_at(kv, end, "value");
    if (!text || !decode_value(text, &v)) return 0;
    int changed = v != value;
    value = v;
    value_revision = revision;
    if (changed && announce) emit_changed();
    return changed && announce;
}

/* MARK: etcd through the gateway */

static const char *url_base;
static CURL *kv_handle;
static struct curl_slist *headers;

struct buffer { char *data; size_t len, cap; };

static void buffer_add(struct buffer *b, const char *p, size_t n) {
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->data = realloc(b->data, b->cap);
        if (!b->data) die("out of memory", NULL);
    }
    memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = 0;
}

static size_t collect(char *p, size_t size, size_t n, void *b) {
    buffer_add(b, p, size * n);
    return size * n;
}

static CURL *new_handle(void) {
    CURL *c = curl_easy_init();
    if (!c) die("curl_easy_init failed", NULL);
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    return c;
}

/* POSTs body to path on the reused handle; the response body, or NULL (etcd unreachable, not 200). */
static const char *post(const char *path, const char *body) {
    static struct buffer response;
    char url[512];
    snprintf(url, sizeof url, "%s%s", url_base, path);
    response.len = 0;
    buffer_add(&response, "", 0);
    curl_easy_setopt(kv_handle, CURLOPT_URL, url);
    curl_easy_setopt(kv_handle, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(kv_handle, CURLOPT_WRITEFUNCTION, collect);
    curl_easy_setopt(kv_handle, CURLOPT_WRITEDATA, &response);
    curl_easy_setopt(kv_handle, CURLOPT_TIMEOUT_MS, 3000L);
    CURLcode rc = curl_easy_perform(kv_handle);
    long status = 0;
    curl_easy_getinfo(kv_handle, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK || status != 200) {
        fprintf(stderr, "fleet-floor: %s: %s (HTTP %ld) %s\n", path, curl_easy_strerror(rc), status, response.data);
        return NULL;
    }
    return response.data;
}

/* Writes v as one Set does; returns the D-Bus error name, or NULL once etcd holds it. */
static const char *write_value(dbus_int32_t v) {
    char value64[1400], body[4096];
    encode_value(v, value64);
    long long defs_known = definition_revision, keys_known = value_revision;
    for (int attempt = 0; attempt < 10; attempt++) {
        snprintf(body, sizeof body,
                 "{\"compare\":[{\"key\":\"%s\",\"target\":\"MOD\",\"mod_revision\":\"%lld\"},"
                 "{\"key\":\"%s\",\"target\":\"MOD\",\"mod_revision\":\"%lld\"}],"
                 "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\"}}],"
                 "\"failure\":[{\"request_range\":{\"key\":\"%s\"}},{\"request_range\":{\"key\":\"%s\"}}]}",
                 defs64, defs_known, keys64, keys_known, keys64, value64, defs64, keys64);
        const char *response = post("/v3/kv/txn", body);
        if (!response) return "org.propbus.PropBus1.Error.Unavailable";
        if (strstr(response, "\"succeeded\":true")) {
            /* The header's revision is the put's: the watch's event of it is skipped. */
            value = v;
            value_revision = number(response, NULL, "revision");
            return NULL;
        }
        /* Lost to another writer: retry on the revisions the failure branch read (the watch
         * announces the other write). */
        const char *first = strstr(response, "response_range");
        const char *second = first ? strstr(first + 1, "response_range") : NULL;
        if (!second) return "org.propbus.PropBus1.Error.Unavailable";
        defs_known = number(first, second, "mod_revision");
        keys_known = number(second, NULL, "mod_revision");
    }
    return "org.propbus.PropBus1.Error.Conflict";
}

/* MARK: the bus */

static DBusHandlerResult on_call(DBusConnection *c, DBusMessage *m, void *data) {
    (void)data;
    if (!dbus_message_has_interface(m, properties_interface)) return DBUS_HANDLER_RESULT_NOT_YET_HANDLED;
    int is_get = dbus_message_has_member(m, "Get"), is_set = dbus_message_has_member(m, "Set");
    if (!is_get && !is_set) return DBUS_HANDLER_RESULT_NOT_YET_HANDLED;
    DBusMessageIter it, variant;
    const char *interface = NULL, *name = NULL;
    DBusMessage *reply = NULL;
    if (!dbus_message_iter_init(m, &it) || dbus_message_iter_get_arg_type(&it) != DBUS_TYPE_STRING) goto bad_args;
    dbus_message_iter_get_basic(&it, &interface);
    if (!dbus_message_iter_next(&it) || dbus_message_iter_get_arg_type(&it) != DBUS_TYPE_STRING) goto bad_args;
    dbus_message_iter_get_basic(&it, &name);
    if (strcmp(interface, values_interface) != 0 || strcmp(name, property_name) != 0) {
        reply = dbus_message_new_error_printf(m, DBUS_ERROR_UNKNOWN_PROPERTY, "no property %s.%s on %s (this floor host has only %s)",
                                              interface, name, object_path, property_name);
    } else if (is_get) {
        reply = dbus_message_new_method_return(m);
        DBusMessageIter out, v;
        dbus_message_iter_init_append(reply, &out);
        dbus_message_iter_open_container(&out, DBUS_TYPE_VARIANT, "i", &v);
        dbus_message_iter_append_basic(&v, DBUS_TYPE_INT32, &value);
        dbus_message_iter_close_container(&out, &v);
    } else {
        if (!dbus_message_iter_next(&it) || dbus_message_iter_get_arg_type(&it) != DBUS_TYPE_VARIANT) goto bad_args;
        dbus_message_iter_recurse(&it, &variant);
        if (dbus_message_iter_get_arg_type(&variant) != DBUS_TYPE_INT32) {
            reply = dbus_message_new_error_printf(m, DBUS_ERROR_INVALID_ARGS, "%s is of type i; the value given is not", property_name);
        } else {
            dbus_int32_t v;
            dbus_message_iter_get_basic(&variant, &v);
            int same = v == value;
            const char *error = same ? NULL : write_value(v);
            int changed = !same && !error;
            reply = error ? dbus_message_new_error_printf(m, error, "etcd did not take %s = %d", property_name, v)
                          : dbus_message_new_method_return(m);
            dbus_connection_send(c, reply, NULL);
            dbus_message_unref(reply);
            reply = NULL;
            if (changed) emit_changed();
        }
    }
    if (reply) {
        dbus_connection_send(c, reply, NULL);
        dbus_message_unref(reply);
    }
    dbus_connection_flush(c);
    return DBUS_HANDLER_RESULT_HANDLED;
bad_args:
    reply = dbus_message_new_error(m, DBUS_ERROR_INVALID_ARGS, is_get ? "Get expects (ss)" : "Set expects (ssv)");
    dbus_connection_send(c, reply, NULL);
    dbus_message_unref(reply);
    dbus_connection_flush(c);
    return DBUS_HANDLER_RESULT_HANDLED;
}

/* MARK: the watch stream */

static struct buffer line;
static int watch_created;

/* One JSON line of the stream: each event's kv is applied (deletes are ignored). */
static void on_watch_line(const char *text) {
    if (strstr(text, "\"created\":true")) watch_created = 1;
    if (strstr(text, "\"canceled\":true") || strstr(text, "\"error\"")) die("the watch was cancelled", text);
    int announced = 0;
    for (const char *kv = strstr(text, "\"kv\":{"); kv;) {
        const char *next = strstr(kv + 1, "\"kv\":{");
        int deleted = kv - text >= 16 && strncmp(kv - 16, "\"type\":\"DELETE\",", 16) == 0;
        if (!deleted) announced |= apply(kv, next, 1);
        kv = next;
    }
    if (announced) dbus_connection_flush(bus);
}

static size_t on_watch(char *p, size_t size, size_t n, void *data) {
    (void)data;
    size_t total = size * n;
    for (size_t start = 0, i = 0; i < total; i++) {
        if (p[i] != '\n') {
            if (i + 1 == total) buffer_add(&line, p + start, total - start);
            continue;
        }
        buffer_add(&line, p + start, i - start);
        on_watch_line(line.data);
        line.len = 0;
        line.data[0] = 0;
        start = i + 1;
    }
    return total;
}

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: %s BUS_ADDRESS URL PREFIX KEY\n", argv[0]);
        return 64;
    }
    const char *address = argv[1], *prefix = argv[3], *key = argv[4];
    const char *attribution = getenv("FLOOR_ATTRIBUTION");
    attribution_bytes = attribution ? atoi(attribution) : 0;
    if (attribution_bytes < 0 || attribution_bytes > 1024) attribution_bytes = 0;
    url_base = argv[2];
    const char *dot = strrchr(key, '.');
    if (!dot || dot == key || !dot[1] || strlen(key) > 100 || !*prefix || strlen(prefix) > 100) die("KEY must be GROUP.NAME", key);
    int at = snprintf(object_path, sizeof object_path, "/org/propbus/PropBus1/");
    for (const char *k = key; k < dot; k++) object_path[at++] = *k == '.' ? '/' : *k;
    object_path[at] = 0;
    snprintf(property_name, sizeof property_name, "%s", dot + 1);
    char text[256];
    snprintf(text, sizeof text, "%sdefs/%s", prefix, key);
    base64((const unsigned char *)text, strlen(text), defs64);
    snprintf(text, sizeof text, "%skeys/%s", prefix, key);
    base64((const unsigned char *)text, strlen(text), keys64);

    curl_global_init(CURL_GLOBAL_DEFAULT);
    headers = curl_slist_append(NULL, "Content-Type: application/json");
    headers = curl_slist_append(headers, "Expect:");
    kv_handle = new_handle();

    /* The definition, once for the fleet: ValueCodec bytes of the a{sv} propbusd writes for
     * "type i, default 0, no options" (the floor never reads it back; it is there to be compared). */
    static const unsigned char definition[] = {
        1, 5, 'a', '{', 's', 'v', '}', 3, 0, 0, 0,
        7, 0, 0, 0, 'd', 'e', 'f', 'a', 'u', 'l', 't', 1, 'i', 0, 0, 0, 0,
        7, 0, 0, 0, 'o', 'p', 't', 'i', 'o', 'n', 's', 5, 'a', '{', 's', 'v', '}', 0, 0, 0, 0,
        4, 0, 0, 0, 't', 'y', 'p', 'e', 1, 's', 1, 0, 0, 0, 'i'};
    char definition64[128], body[4096], prefix64[288], end64[288];
    base64(definition, sizeof definition, definition64);
    snprintf(body, sizeof body,
             "{\"compare\":[{\"key\":\"%s\",\"target\":\"CREATE\",\"create_revision\":\"0\"}],"
             "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\"}}]}",
             defs64, defs64, definition64);
    if (!post("/v3/kv/txn", body)) die("etcd is unreachable", url_base);

    /* Read the prefix at one revision, then watch from the next: nothing falls between. */
    size_t prefix_length = strlen(prefix);
    snprintf(text, sizeof text, "%s", prefix);
    base64((const unsigned char *)text, prefix_length, prefix64);
    text[prefix_length - 1]++;
    base64((const unsigned char *)text, prefix_length, end64);
    snprintf(body, sizeof body, "{\"key\":\"%s\",\"range_end\":\"%s\"}", prefix64, end64);
    const char *range = post("/v3/kv/range", body);
    if (!range) die("etcd is unreachable", url_base);
    long long revision = number(range, NULL, "revision");
    for (const char *kv = strstr(range, "{\"key\":\""); kv;) {
        const char *next = strstr(kv + 1, "{\"key\":\"");
        apply(kv, next, 0);
        kv = next;
    }

    CURLM *multi = curl_multi_init();
    CURL *watch = new_handle();
    char url[512], watch_body[2048];
    snprintf(url, sizeof url, "%s/v3/watch", url_base);
    snprintf(watch_body, sizeof watch_body,
             "{\"create_request\":{\"key\":\"%s\",\"range_end\":\"%s\",\"start_revision\":\"%lld\"}}",
             prefix64, end64, revision + 1);
    curl_easy_setopt(watch, CURLOPT_URL, url);
    curl_easy_setopt(watch, CURLOPT_POSTFIELDS, watch_body);
    curl_easy_setopt(watch, CURLOPT_WRITEFUNCTION, on_watch);
    curl_multi_add_handle(multi, watch);

    DBusError err;
    dbus_error_init(&err);
    bus = dbus_connection_open_private(address, &err);
    if (!bus || !dbus_bus_register(bus, &err)) die("cannot connect to the bus", err.message);
    dbus_connection_set_exit_on_disconnect(bus, FALSE);
    static const DBusObjectPathVTable vtable = {.message_function = on_call};
    if (!dbus_connection_register_object_path(bus, object_path, &vtable, NULL)) die("cannot export", object_path);
    int bus_fd = -1;
    if (!dbus_connection_get_unix_fd(bus, &bus_fd)) die("the bus has no file descriptor", address);

    int running = 1, named = 0;
    while (running) {
        while (dbus_connection_dispatch(bus) == DBUS_DISPATCH_DATA_REMAINS) {}
        if (!dbus_connection_get_is_connected(bus)) die("the bus went away", address);
        struct curl_waitfd bus_wait = {.fd = bus_fd, .events = CURL_WAIT_POLLIN};
        curl_multi_poll(multi, &bus_wait, 1, 1000, NULL);
        if (bus_wait.revents) dbus_connection_read_write(bus, 0);
        curl_multi_perform(multi, &running);
        if (watch_created && !named) {
            /* Owned only now, so that a client seeing the owner can rely on the watch. */
            if (dbus_bus_request_name(bus, "org.propbus.PropBus1", DBUS_NAME_FLAG_DO_NOT_QUEUE, &err) != DBUS_REQUEST_NAME_REPLY_PRIMARY_OWNER)
                die("cannot own org.propbus.PropBus1", err.message);
            named = 1;
        }
    }
    die("the watch ended", url_base);
}
