/* Shared by the bench clients: connecting to a bus address, and dying with the D-Bus error. */
#ifndef PROPBUS_BENCH_BUS_H
#define PROPBUS_BENCH_BUS_H
#include <dbus/dbus.h>
#include <stdio.h>
#include <stdlib.h>

/* Prints "PROG: WHAT: ERROR.NAME: MESSAGE" and exits 1. */
static void bench_die(const char *prog, const char *what, DBusError *err)
{
    fprintf(stderr, "%s: %s: %s: %s\n", prog, what, err && err->name ? err->name : "",
            err && err->message ? err->message : "");
    exit(1);
}

/* A private connection to the bus at ADDRESS, registered (Hello sent); dies on failure. */
static DBusConnection *bench_connect(const char *prog, const char *address)
{
    DBusError err;
    dbus_error_init(&err);
    DBusConnection *conn = dbus_connection_open_private(address, &err);
    if (!conn || !dbus_bus_register(conn, &err))
        bench_die(prog, "cannot connect", &err);
    return conn;
}
#endif
