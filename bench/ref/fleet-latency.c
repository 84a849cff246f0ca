/* Fleet latency through two propbusd hosts on two buses. Prints one line:
 * "p50_us p99_us max_us count".
 *
 * usage: fleet-latency propagate ADDRESS_A ADDRESS_B PATH NAME N
 *        fleet-latency roundtrip ADDRESS_A PATH NAME N
 *        fleet-latency fanout PATH NAME N ADDRESS_A ADDRESS...
 *        fleet-latency throughput ADDRESS_A PATH NAME WRITERS N
 *
 * propagate: Properties.Set of the fleet key (type i) on host A's bus, until host B's
 *            PropertiesChanged carrying the same value arrives on B's bus (A's reply is then
 *            collected, outside the measured time).
 * roundtrip: Properties.Set on A until its reply (the txn to etcd and the mirror's commit).
 * fanout:    Properties.Set on the first address's host, until PropertiesChanged carrying the
 *            value has arrived from the host on every address given (the writer's included):
 *            the time the whole fleet took to see the change. One poll over every bus's fd.
 * throughput: WRITERS threads, each on a connection of its own, each Setting its own key
 *            (NAME0, NAME1, … of PATH) N times, each Set waiting for its reply: prints
 *            "sets_per_s p50_us p99_us count" over all of them. */
#include <dbus/dbus.h>
#include "bus.h"
#include "latency.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <pthread.h>

static const char *values_interface = "org.propbus.PropBus1.Values";

#include "carries.h"

static DBusMessage *set_call(const char *path, const char *name, dbus_int32_t value) {
    DBusMessage *m = dbus_message_new_method_call("org.propbus.PropBus1", path, "org.freedesktop.DBus.Properties", "Set");
    DBusMessageIter it, var;
    dbus_message_iter_init_append(m, &it);
    dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &values_interface);
    dbus_message_iter_append_basic(&it, DBUS_TYPE_STRING, &name);
    dbus_message_iter_open_container(&it, DBUS_TYPE_VARIANT, "i", &var);
    dbus_message_iter_append_basic(&var, DBUS_TYPE_INT32, &value);
    dbus_message_iter_close_container(&it, &var);
    return m;
}

/* Blocks for the reply of pending; dies on an error reply. */
static void collect(DBusPendingCall *pending) {
    dbus_pending_call_block(pending);
    DBusMessage *reply = dbus_pending_call_steal_reply(pending);
    dbus_pending_call_unref(pending);
    if (dbus_message_get_type(reply) == DBUS_MESSAGE_TYPE_ERROR) {
        DBusError err;
        dbus_error_init(&err);
        dbus_set_error_from_message(&err, reply);
        bench_die("fleet-latency", "Set", &err);
    }
    dbus_message_unref(reply);
}

/* Sends the Set m on conn and flushes it; its pending call, or death. */
static DBusPendingCall *send_set(DBusConnection *conn, DBusMessage *m) {
    DBusPendingCall *pending = NULL;
    if (!dbus_connection_send_with_reply(conn, m, &pending, 10000) || !pending) {
        fprintf(stderr, "fleet-latency: cannot send\n");
        exit(1);
    }
    dbus_connection_flush(conn);
    dbus_message_unref(m);
    return pending;
}

/* Subscribes conn to the host's PropertiesChanged on path; dies on failure. */
static void add_signal_match(DBusConnection *conn, const char *path) {
    DBusError err;
    dbus_error_init(&err);
    char rule[512];
    snprintf(rule, sizeof rule, "type='signal',sender='org.propbus.PropBus1',path='%s',"
             "interface='org.freedesktop.DBus.Properties',member='PropertiesChanged'", path);
    dbus_bus_add_match(conn, rule, &err);
    if (dbus_error_is_set(&err)) bench_die("fleet-latency", "AddMatch", &err);
}

static int propagate(const char *address_a, const char *address_b, const char *path, const char *name, int n) {
    DBusConnection *a = bench_connect("fleet-latency", address_a);
    DBusConnection *b = bench_connect("fleet-latency", address_b);
    add_signal_match(b, path);
    long long *lat = calloc((size_t)n, sizeof *lat);
    /* Values start from the clock so that consecutive runs never write a value already held
     * (a same-value Set sends no signal). */
    dbus_int32_t base = (dbus_int32_t)((now_ns() / 1000) & 0x3fffffff);
    for (int i = 0; i < n; i++) {
        dbus_int32_t value = base + i;
        DBusMessage *m = set_call(path, name, value);
        long long start = now_ns();
        DBusPendingCall *pending = send_set(a, m);
        int seen = 0;
        while (!seen) {
            if (!dbus_connection_read_write(b, 10000)) { fprintf(stderr, "fleet-latency: B disconnected\n"); return 1; }
            DBusMessage *in;
            while ((in = dbus_connection_pop_message(b))) {
                if (!seen && carries(in, path, name, value)) { seen = 1; lat[i] = now_ns() - start; }
                dbus_message_unref(in);
            }
        }
        collect(pending);
    }
    report_latencies(lat, n);
    return 0;
}

static int roundtrip(const char *address_a, const char *path, const char *name, int n) {
    DBusConnection *a = bench_connect("fleet-latency", address_a);
    long long *lat = calloc((size_t)n, sizeof *lat);
    dbus_int32_t base = (dbus_int32_t)((now_ns() / 1000) & 0x3fffffff);
    for (int i = 0; i < n; i++) {
        DBusMessage *m = set_call(path, name, base + i);
        DBusPendingCall *pending = NULL;
        long long start = now_ns();
        if (!dbus_connection_send_with_reply(a, m, &pending, 10000) || !pending) {
            fprintf(stderr, "fleet-latency: cannot send\n");
            return 1;
        }
        dbus_message_unref(m);
        collect(pending);
        lat[i] = now_ns() - start;
    }
    report_latencies(lat, n);
    return 0;
}

static int fanout(const char *path, const char *name, int n, int count, char **addresses) {
    DBusConnection **c = calloc((size_t)count, sizeof *c);
    struct pollfd *fds = calloc((size_t)count, sizeof *fds);
    int *seen = calloc((size_t)count, sizeof *seen);
    for (int h = 0; h < count; h++) {
        c[h] = bench_connect("fleet-latency", addresses[h]);
        add_signal_match(c[h], path);
        if (!dbus_connection_get_unix_fd(c[h], &fds[h].fd)) { fprintf(stderr, "fleet-latency: no fd\n"); return 1; }
    }
    /* The Set goes on a connection of its own: popping the listeners' messages would take its
     * reply away from the pending call. */
    DBusConnection *writer = bench_connect("fleet-latency", addresses[0]);
    long long *lat = calloc((size_t)n, sizeof *lat);
    dbus_int32_t base = (dbus_int32_t)((now_ns() / 1000) & 0x3fffffff);
    for (int i = 0; i < n; i++) {
        dbus_int32_t value = base + i;
        DBusMessage *m = set_call(path, name, value);
        long long start = now_ns();
        DBusPendingCall *pending = send_set(writer, m);
        memset(seen, 0, (size_t)count * sizeof *seen);
        int left = count;
        while (left > 0) {
            /* What libdbus has already read first, then a poll over the hosts still awaited. */
            for (int h = 0; h < count; h++) {
                DBusMessage *in;
                while ((in = dbus_connection_pop_message(c[h]))) {
                    if (!seen[h] && carries(in, path, name, value)) { seen[h] = 1; left--; }
                    dbus_message_unref(in);
                }
                fds[h].events = seen[h] ? 0 : POLLIN;
                fds[h].revents = 0;
            }
            if (left == 0) break;
            if (poll(fds, (nfds_t)count, 10000) <= 0) { fprintf(stderr, "fleet-latency: no signal within 10 s\n"); return 1; }
            for (int h = 0; h < count; h++) {
                if (fds[h].revents && !dbus_connection_read_write(c[h], 0)) {
                    fprintf(stderr, "fleet-latency: %s disconnected\n", addresses[h]);
                    return 1;
                }
            }
        }
        lat[i] = now_ns() - start;
        collect(pending);
    }
    report_latencies(lat, n);
    return 0;
}

struct writer { const char *address, *path; char name[128]; int n; long long *lat; };

static void *write_flat_out(void *arg) {
    struct writer *w = arg;
    DBusConnection *a = bench_connect("fleet-latency", w->address);
    dbus_int32_t base = (dbus_int32_t)((now_ns() / 1000) & 0x3fffffff);
    for (int i = 0; i < w->n; i++) {
        DBusMessage *m = set_call(w->path, w->name, base + i);
        DBusPendingCall *pending = NULL;
        long long start = now_ns();
        if (!dbus_connection_send_with_reply(a, m, &pending, 10000) || !pending) {
            fprintf(stderr, "fleet-latency: cannot send\n");
            exit(1);
        }
        dbus_message_unref(m);
        collect(pending);
        w->lat[i] = now_ns() - start;
    }
    dbus_connection_close(a);
    dbus_connection_unref(a);
    return NULL;
}

static int throughput(const char *address, const char *path, const char *name, int writers, int n) {
    dbus_threads_init_default();
    struct writer *w = calloc((size_t)writers, sizeof *w);
    pthread_t *threads = calloc((size_t)writers, sizeof *threads);
    long long *lat = calloc((size_t)(writers * n), sizeof *lat);
    long long start = now_ns();
    for (int i = 0; i < writers; i++) {
        w[i].address = address;
        w[i].path = path;
        snprintf(w[i].name, sizeof w[i].name, "%s%d", name, i);
        w[i].n = n;
        w[i].lat = lat + (size_t)i * (size_t)n;
        pthread_create(&threads[i], NULL, write_flat_out, &w[i]);
    }
    for (int i = 0; i < writers; i++) pthread_join(threads[i], NULL);
    double seconds = (now_ns() - start) / 1e9;
    int total = writers * n;
    qsort(lat, (size_t)total, sizeof *lat, compare_ns);
    printf("%.0f %.1f %.1f %d\n", total / seconds, lat[total / 2] / 1000.0, lat[(total * 99) / 100] / 1000.0, total);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 7 && strcmp(argv[1], "propagate") == 0) return propagate(argv[2], argv[3], argv[4], argv[5], atoi(argv[6]));
    if (argc == 6 && strcmp(argv[1], "roundtrip") == 0) return roundtrip(argv[2], argv[3], argv[4], atoi(argv[5]));
    if (argc >= 6 && strcmp(argv[1], "fanout") == 0) return fanout(argv[2], argv[3], atoi(argv[4]), argc - 5, argv + 5);
    if (argc == 7 && strcmp(argv[1], "throughput") == 0) return throughput(argv[2], argv[3], argv[4], atoi(argv[5]), atoi(argv[6]));
    fprintf(stderr, "usage: %s propagate ADDRESS_A ADDRESS_B PATH NAME N\n"
                    "       %s roundtrip ADDRESS_A PATH NAME N\n"
                    "       %s fanout PATH NAME N ADDRESS_A ADDRESS...\n"
                    "       %s throughput ADDRESS_A PATH NAME WRITERS N\n", argv[0], argv[0], argv[0], argv[0]);
    return 64;
}
