/* Durable-write load for propbusd and dconf-service, over libdbus (GLib only builds dconf's
 * GVariant changesets).
 *
 *   write-client ADDRESS propbus|dconf WRITERS SECONDS [MAX_WRITES_PER_WRITER]
 *       WRITERS processes, each with its own connection, start together and each sets its own
 *       key (propbus: bench.wN, int32; dconf: /bench/wN, int32) to a new value, waiting for
 *       every reply, until SECONDS pass or it made MAX writes. Prints
 *       "WRITES ELAPSED_S WRITES_PER_S" (acknowledged writes over all writers).
 *       env WRITE_CLIENT_PAUSE_US: each writer waits that long on average (drawn from 0 to twice
 *       it) after each reply before its next write (default 0): fewer writes then arrive while a commit runs, so commits carry
 *       fewer writes (bench/history-callgrind.sh varies it to separate a commit's fixed cost).
 *   write-client ADDRESS preload-propbus N
 *       Creates bench.w0..bench.w15 and N stored properties bench.k0..k(N-1) (pipelined).
 *   write-client ADDRESS preload-propbus-transient
 *       Creates bench.w0..bench.w15 as transient properties (persistent=false).
 *   write-client ADDRESS preload-dconf N
 *       Writes N keys /bench/k0..k(N-1) (in changesets of 10000 keys).
 *
 * Any error reply aborts with exit status 1.
 */
#include <dbus/dbus.h>
#include <glib.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define PROPBUS "org.propbus.PropBus1"
#define PROPBUS_ROOT "/org/propbus/PropBus1"
#define DCONF "ca.desrt.dconf"
#define DCONF_PATH "/ca/desrt/dconf/Writer/user"
#define DCONF_IFACE "ca.desrt.dconf.Writer"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec / 1e9;
}

static void die(const char *what, DBusError *err)
{
    fprintf(stderr, "write-client: %s: %s: %s\n", what, err && err->name ? err->name : "",
            err && err->message ? err->message : "");
    exit(1);
}

static DBusConnection *connect_bus(const char *address)
{
    DBusError err;
    dbus_error_init(&err);
    DBusConnection *conn = dbus_connection_open_private(address, &err);
    if (!conn || !dbus_bus_register(conn, &err))
        die("cannot connect", &err);
    return conn;
}

static DBusMessage *call(DBusConnection *conn, DBusMessage *req)
{
    DBusError err;
    dbus_error_init(&err);
    DBusMessage *reply = dbus_connection_send_with_reply_and_block(conn, req, 600000, &err);
    if (!reply)
        die(dbus_message_get_member(req), &err);
    dbus_message_unref(req);
    return reply;
}

/* Properties.Set(Values, NAME, <int32 VALUE>) on the bench group. */
static DBusMessage *propbus_set(const char *name, dbus_int32_t value)
{
    DBusMessage *m = dbus_message_new_method_call(PROPBUS, PROPBUS_ROOT "/bench", DBUS_INTERFACE_PROPERTIES, "Set");
    const char *iface = "org.propbus.PropBus1.Values";
    DBusMessageIter it, var;
    dbus_message_iter_init_append(m, &it);
    dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &iface);
    dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &name);
    dbus_message_iter_open_container(&it, DBUS_TYPE_VARIANT, "i", &var);
    dbus_message_iter_append_basic(&var, DBUS_TYPE_INT32, &value);
    dbus_message_iter_close_container(&it, &var);
    return m;
}

/* Manager.CreateProperty(KEY, "i", <0>, {"value": <VALUE>}) */
static DBusMessage *propbus_create(const char *key, dbus_int32_t value)
{
    DBusMessage *m = dbus_message_new_method_call(PROPBUS, PROPBUS_ROOT, "org.propbus.PropBus1.Manager", "CreateProperty");
    const char *type = "i", *option = "value";
    dbus_int32_t zero = 0;
    DBusMessageIter it, var, dict, entry, inner;
    dbus_message_iter_init_append(m, &it);
    dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &key);
    dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &type);
    dbus_message_iter_open_container(&it, DBUS_TYPE_VARIANT, "i", &var);
    dbus_message_iter_append_basic(&var, DBUS_TYPE_INT32, &zero);
    dbus_message_iter_close_container(&it, &var);
    dbus_message_iter_open_container(&it, DBUS_TYPE_ARRAY, "{sv}", &dict);
    dbus_message_iter_open_container(&dict, DBUS_TYPE_DICT_ENTRY, NULL, &entry);
    dbus_message_iter_append_basic(&entry, DBUS_TYPE_STRING, &option);
    dbus_message_iter_open_container(&entry, DBUS_TYPE_VARIANT, "i", &inner);
    dbus_message_iter_append_basic(&inner, DBUS_TYPE_INT32, &value);
    dbus_message_iter_close_container(&entry, &inner);
    dbus_message_iter_close_container(&dict, &entry);
    dbus_message_iter_close_container(&it, &dict);
    return m;
}

/* CreateProperty(key, "i", <0>, {"persistent": <false>}) */
static DBusMessage *propbus_create_transient(const char *key)
{
    DBusMessage *m = dbus_message_new_method_call(PROPBUS, PROPBUS_ROOT, "org.propbus.PropBus1.Manager", "CreateProperty");
    const char *type = "i", *option = "persistent";
    dbus_int32_t zero = 0;
    dbus_bool_t no = FALSE;
    DBusMessageIter it, var, dict, entry, inner;
    dbus_message_iter_init_append(m, &it);
    dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &key);
    dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &type);
    dbus_message_iter_open_container(&it, DBUS_TYPE_VARIANT, "i", &var);
    dbus_message_iter_append_basic(&var, DBUS_TYPE_INT32, &zero);
    dbus_message_iter_close_container(&it, &var);
    dbus_message_iter_open_container(&it, DBUS_TYPE_ARRAY, "{sv}", &dict);
    dbus_message_iter_open_container(&dict, DBUS_TYPE_DICT_ENTRY, NULL, &entry);
    dbus_message_iter_append_basic(&entry, DBUS_TYPE_STRING, &option);
    dbus_message_iter_open_container(&entry, DBUS_TYPE_VARIANT, "b", &inner);
    dbus_message_iter_append_basic(&inner, DBUS_TYPE_BOOLEAN, &no);
    dbus_message_iter_close_container(&entry, &inner);
    dbus_message_iter_close_container(&dict, &entry);
    dbus_message_iter_close_container(&it, &dict);
    return m;
}

/* Writer.Change(ay changeset): the changeset is a serialized GVariant a{smv}. */
static DBusMessage *dconf_change(const char *prefix, long first, long count, dbus_int32_t value)
{
    GVariantBuilder builder;
    g_variant_builder_init(&builder, G_VARIANT_TYPE("a{smv}"));
    for (long i = first; i < first + count; i++) {
        char key[64];
        snprintf(key, sizeof key, "/bench/%s%ld", prefix, i);
        g_variant_builder_add(&builder, "{smv}", key, g_variant_new_int32(value >= 0 ? value : (dbus_int32_t)i + 1));
    }
    GVariant *changeset = g_variant_ref_sink(g_variant_builder_end(&builder));
    const unsigned char *data = g_variant_get_data(changeset);
    int size = (int)g_variant_get_size(changeset);
    DBusMessage *m = dbus_message_new_method_call(DCONF, DCONF_PATH, DCONF_IFACE, "Change");
    dbus_message_append_args(m, DBUS_TYPE_ARRAY, DBUS_TYPE_BYTE, &data, size, DBUS_TYPE_INVALID);
    g_variant_unref(changeset);
    return m;
}

static int run_writers(const char *address, const char *target, int writers, double seconds, long max_writes)
{
    int dconf = strcmp(target, "dconf") == 0;
    int fds[2];
    if (pipe(fds) != 0) { perror("pipe"); return 1; }
    double start = now() + 0.5 + writers * 0.02;
    const char *pause = getenv("WRITE_CLIENT_PAUSE_US");
    useconds_t pause_us = pause ? (useconds_t)atol(pause) : 0;
    for (int w = 0; w < writers; w++) {
        pid_t pid = fork();
        if (pid < 0) { perror("fork"); return 1; }
        if (pid > 0) continue;
        close(fds[0]);
        DBusConnection *conn = connect_bus(address);
        char name[32];
        snprintf(name, sizeof name, "w%d", w);
        while (now() < start) usleep(1000);
        long done = 0;
        unsigned seed = (unsigned)getpid();
        double end = start + seconds;
        /* Values never repeat, so no write is a no-op. */
        dbus_int32_t value = (dbus_int32_t)(getpid() % 1000) * 1000000;
        while (done < max_writes && now() < end) {
            value++;
            DBusMessage *req = dconf ? dconf_change("w", w, 1, value) : propbus_set(name, value);
            dbus_message_unref(call(conn, req));
            done++;
            /* Drawn from 0 … 2 × the pause: the writers' replies come together (one commit's),
             * and equal pauses would bring their next writes together again. */
            if (pause_us > 0) usleep((useconds_t)(rand_r(&seed) % (2 * pause_us + 1)));
        }
        double finished = now();
        dprintf(fds[1], "%ld %.6f\n", done, finished - start);
        _exit(0);
    }
    close(fds[1]);
    FILE *results = fdopen(fds[0], "r");
    long total = 0, done;
    double elapsed = 0, took;
    int reported = 0;
    while (fscanf(results, "%ld %lf", &done, &took) == 2) {
        total += done;
        if (took > elapsed) elapsed = took;
        reported++;
    }
    int status, failed = 0;
    while (wait(&status) > 0)
        if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) failed = 1;
    if (failed || reported != writers) {
        fprintf(stderr, "write-client: a writer failed\n");
        return 1;
    }
    printf("%ld %.3f %.1f\n", total, elapsed, total / elapsed);
    return 0;
}

static int preload_propbus(const char *address, long n)
{
    DBusConnection *conn = connect_bus(address);
    for (int w = 0; w < 16; w++) {
        char key[32];
        snprintf(key, sizeof key, "bench.w%d", w);
        dbus_message_unref(call(conn, propbus_create(key, 0)));
    }
    /* Pipelined in batches: the daemon drains each batch in a few rounds, one commit each. */
    const long batch = 2000;
    DBusPendingCall **pending = calloc(batch, sizeof *pending);
    for (long first = 0; first < n; first += batch) {
        long count = n - first < batch ? n - first : batch;
        for (long i = 0; i < count; i++) {
            char key[32];
            snprintf(key, sizeof key, "bench.k%ld", first + i);
            DBusMessage *req = propbus_create(key, (dbus_int32_t)(first + i + 1));
            if (!dbus_connection_send_with_reply(conn, req, &pending[i], 600000) || !pending[i]) die("send", NULL);
            dbus_message_unref(req);
        }
        for (long i = 0; i < count; i++) {
            dbus_pending_call_block(pending[i]);
            DBusMessage *reply = dbus_pending_call_steal_reply(pending[i]);
            if (dbus_message_get_type(reply) == DBUS_MESSAGE_TYPE_ERROR) {
                DBusError err;
                dbus_error_init(&err);
                dbus_set_error_from_message(&err, reply);
                die("CreateProperty", &err);
            }
            dbus_message_unref(reply);
            dbus_pending_call_unref(pending[i]);
        }
    }
    free(pending);
    return 0;
}

static int preload_dconf(const char *address, long n)
{
    DBusConnection *conn = connect_bus(address);
    dbus_message_unref(call(conn, dconf_change("w", 0, 16, 0)));
    for (long first = 0; first < n; first += 10000)
        dbus_message_unref(call(conn, dconf_change("k", first, n - first < 10000 ? n - first : 10000, -1)));
    return 0;
}

int main(int argc, char **argv)
{
    if (argc == 4 && strcmp(argv[2], "preload-propbus") == 0)
        return preload_propbus(argv[1], atol(argv[3]));
    if (argc == 3 && strcmp(argv[2], "preload-propbus-transient") == 0) {
        DBusConnection *conn = connect_bus(argv[1]);
        for (int w = 0; w < 16; w++) {
            char key[32];
            snprintf(key, sizeof key, "bench.w%d", w);
            dbus_message_unref(call(conn, propbus_create_transient(key)));
        }
        return 0;
    }
    if (argc == 4 && strcmp(argv[2], "preload-dconf") == 0)
        return preload_dconf(argv[1], atol(argv[3]));
    if ((argc == 5 || argc == 6) && (strcmp(argv[2], "propbus") == 0 || strcmp(argv[2], "dconf") == 0))
        return run_writers(argv[1], argv[2], atoi(argv[3]), atof(argv[4]), argc == 6 ? atol(argv[5]) : 1L << 40);
    fprintf(stderr, "usage: see the comment at the top of bench/ref/write-client.c\n");
    return 2;
}
