/* Latency of one command execution, against the program's own cost. Prints one line:
 * "p50_us p99_us max_us count".
 *
 * usage: exec-latency execute ADDRESS COMMAND_PATH N   Command.Execute(v "x"), reply awaited
 *        exec-latency spawn PROGRAM N                  posix_spawn + stdin/stdout pipes +
 *                                                      waitpid, what the daemon does at least
 * The reference runs the same program the same way, minus D-Bus and propbusd. */
#include <dbus/dbus.h>
#include "latency.h"
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern char **environ;

static long long execute_once(DBusConnection *c, const char *path) {
    DBusMessage *m = dbus_message_new_method_call("org.propbus.PropBus1", path, "org.propbus.PropBus1.Command", "Execute");
    DBusMessageIter it, var;
    const char *input = "x";
    dbus_message_iter_init_append(m, &it);
    dbus_message_iter_open_container(&it, DBUS_TYPE_VARIANT, "s", &var);
    dbus_message_iter_append_basic(&var, DBUS_TYPE_STRING, &input);
    dbus_message_iter_close_container(&it, &var);
    DBusError err;
    dbus_error_init(&err);
    long long t0 = now_ns();
    DBusMessage *r = dbus_connection_send_with_reply_and_block(c, m, 30000, &err);
    long long t1 = now_ns();
    dbus_message_unref(m);
    if (!r) { fprintf(stderr, "Execute: %s: %s\n", err.name, err.message); exit(1); }
    dbus_message_unref(r);
    return t1 - t0;
}

static long long spawn_once(const char *program) {
    int in[2], out[2];
    if (pipe(in) || pipe(out)) { perror("pipe"); exit(1); }
    posix_spawn_file_actions_t actions;
    posix_spawn_file_actions_init(&actions);
    posix_spawn_file_actions_adddup2(&actions, in[0], 0);
    posix_spawn_file_actions_adddup2(&actions, out[1], 1);
    posix_spawn_file_actions_addclose(&actions, in[1]);
    posix_spawn_file_actions_addclose(&actions, out[0]);
    char *argv[] = {(char *)program, NULL};
    long long t0 = now_ns();
    pid_t pid;
    if (posix_spawnp(&pid, program, &actions, NULL, argv, environ)) { perror("posix_spawn"); exit(1); }
    close(in[0]);
    close(out[1]);
    if (write(in[1], "x", 1) < 0) { /* the program need not read */ }
    close(in[1]);
    char buf[4096];
    while (read(out[0], buf, sizeof buf) > 0) {}
    close(out[0]);
    int status;
    waitpid(pid, &status, 0);
    long long t1 = now_ns();
    posix_spawn_file_actions_destroy(&actions);
    return t1 - t0;
}

int main(int argc, char **argv) {
    if (argc == 5 && strcmp(argv[1], "execute") == 0) {
        int n = atoi(argv[4]);
        DBusError err;
        dbus_error_init(&err);
        DBusConnection *c = dbus_connection_open_private(argv[2], &err);
        if (!c || !dbus_bus_register(c, &err)) { fprintf(stderr, "%s\n", err.message); return 1; }
        long long *lat = malloc(sizeof *lat * n);
        for (int i = 0; i < 20; i++) execute_once(c, argv[3]);
        for (int i = 0; i < n; i++) lat[i] = execute_once(c, argv[3]);
        report_latencies(lat, n);
        return 0;
    }
    if (argc == 4 && strcmp(argv[1], "spawn") == 0) {
        int n = atoi(argv[3]);
        long long *lat = malloc(sizeof *lat * n);
        for (int i = 0; i < 20; i++) spawn_once(argv[2]);
        for (int i = 0; i < n; i++) lat[i] = spawn_once(argv[2]);
        report_latencies(lat, n);
        return 0;
    }
    fprintf(stderr, "usage: exec-latency execute ADDRESS PATH N | exec-latency spawn PROGRAM N\n");
    return 64;
}
