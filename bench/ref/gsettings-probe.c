/* A GSettings user for bench/gsettings.sh: times reads and writes of one key through whichever
 * backend GSETTINGS_BACKEND selects (dconf or propbus), in this process.
 *
 *   gsettings-probe SCHEMA KEY MODE COUNT
 *
 *   first   the first read of a new GSettings: subscribe and fill its cache (COUNT times, each
 *           with a new GSettings of a path not read before: SCHEMA's path + "pN/")
 *   read    COUNT reads of KEY after a first one (answered from the backend's cache); the
 *           thread's CPU time, not wall time: a read is all CPU, and on a shared machine wall
 *           time counts the other processes' turns too
 *   write   COUNT writes of KEY, each followed by g_settings_sync(): acknowledged by the daemon
 *   burst   COUNT writes of KEY, then one g_settings_sync()
 *
 * KEY is an int32 key ("i"), written with alternating values so that no write is a no-op.
 * Prints the time per operation in nanoseconds. */
#include <gio/gio.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

static double clock_ns(clockid_t clock) {
    struct timespec ts;
    clock_gettime(clock, &ts);
    return (double) ts.tv_sec * 1e9 + (double) ts.tv_nsec;
}

static double now_ns(void) { return clock_ns(CLOCK_MONOTONIC); }

int main(int argc, char **argv) {
    if (argc != 5) {
        fprintf(stderr, "usage: gsettings-probe SCHEMA KEY first|read|write|burst COUNT\n");
        return 64;
    }
    const char *schema = argv[1], *key = argv[2], *mode = argv[3];
    long count = strtol(argv[4], NULL, 10);
    double start = 0, end = 0;
    if (strcmp(mode, "first") == 0) {
        GSettingsSchemaSource *source = g_settings_schema_source_get_default();
        GSettingsSchema *relocatable = g_settings_schema_source_lookup(source, "org.propbus.bench.profile", TRUE);
        start = now_ns();
        for (long i = 0; i < count; i++) {
            char path[64];
            snprintf(path, sizeof path, "/org/propbus/bench/p%ld/", i);
            GSettings *settings = g_settings_new_full(relocatable, NULL, path);
            g_variant_unref(g_settings_get_value(settings, key));
            g_object_unref(settings);
        }
        end = now_ns();
        g_settings_schema_unref(relocatable);
    } else {
        GSettings *settings = g_settings_new(schema);
        gint32 first = g_settings_get_int(settings, key);
        if (strcmp(mode, "read") == 0) {
            gint64 sum = 0;
            start = clock_ns(CLOCK_THREAD_CPUTIME_ID);
            for (long i = 0; i < count; i++) {
                GVariant *value = g_settings_get_value(settings, key);
                sum += g_variant_get_int32(value);
                g_variant_unref(value);
            }
            end = clock_ns(CLOCK_THREAD_CPUTIME_ID);
            if (sum != (gint64) first * count) fprintf(stderr, "gsettings-probe: the value changed under the reads\n");
        } else if (strcmp(mode, "write") == 0 || strcmp(mode, "burst") == 0) {
            gboolean each = strcmp(mode, "write") == 0;
            start = now_ns();
            for (long i = 0; i < count; i++) {
                if (!g_settings_set_int(settings, key, first + 1 + (gint32) (i % 2))) {
                    fprintf(stderr, "gsettings-probe: write %ld refused\n", i);
                    return 1;
                }
                if (each) g_settings_sync();
            }
            g_settings_sync();
            end = now_ns();
        } else {
            fprintf(stderr, "gsettings-probe: unknown mode %s\n", mode);
            return 64;
        }
        g_object_unref(settings);
    }
    printf("%.0f\n", (end - start) / (double) count);
    return 0;
}
