/* Start-up time of a D-Bus service: exec until its bus name is owned.
 *
 *   ready-client ADDRESS BUS_NAME -- COMMAND [ARGS...]
 *
 * Subscribes to NameOwnerChanged for BUS_NAME (before starting anything, or the signal could
 * come first), forks and execs COMMAND, and prints "MS PID": milliseconds from the fork to the
 * signal saying BUS_NAME has an owner, and the child's pid (left running for the caller to
 * measure and stop). The child's stdout goes to stderr. Gives up after 60 s, killing the child.
 */
#include "bus.h"
#include "latency.h"
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    if (argc < 5 || strcmp(argv[3], "--") != 0) {
        fprintf(stderr, "usage: %s ADDRESS BUS_NAME -- COMMAND [ARGS...]\n", argv[0]);
        return 2;
    }
    const char *name = argv[2];
    DBusConnection *conn = bench_connect("ready-client", argv[1]);
    DBusError err;
    dbus_error_init(&err);
    char rule[512];
    snprintf(rule, sizeof rule, "type='signal',sender='org.freedesktop.DBus',member='NameOwnerChanged',arg0='%s'", name);
    dbus_bus_add_match(conn, rule, &err);
    if (dbus_error_is_set(&err)) bench_die("ready-client", "AddMatch", &err);

    long long t0 = now_ns();
    pid_t pid = fork();
    if (pid < 0) { perror("fork"); return 1; }
    if (pid == 0) {
        dup2(2, 1); /* our stdout is the report; the service's output goes to stderr */
        execvp(argv[4], argv + 4);
        perror("exec");
        _exit(127);
    }
    while (dbus_connection_read_write(conn, 1000)) {
        DBusMessage *m;
        while ((m = dbus_connection_pop_message(conn))) {
            const char *owned, *old_owner, *new_owner;
            if (dbus_message_is_signal(m, "org.freedesktop.DBus", "NameOwnerChanged") &&
                dbus_message_get_args(m, NULL, DBUS_TYPE_STRING, &owned, DBUS_TYPE_STRING, &old_owner,
                                      DBUS_TYPE_STRING, &new_owner, DBUS_TYPE_INVALID) && new_owner[0]) {
                printf("%.1f %d\n", (now_ns() - t0) / 1e6, pid);
                return 0;
            }
            dbus_message_unref(m);
        }
        if (waitpid(pid, NULL, WNOHANG) == pid) {
            fprintf(stderr, "ready-client: %s exited before owning %s\n", argv[4], name);
            return 1;
        }
        if (now_ns() - t0 > 60000000000LL) break;
    }
    fprintf(stderr, "ready-client: %s never owned %s\n", argv[4], name);
    kill(pid, SIGKILL);
    return 1;
}
