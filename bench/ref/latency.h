/* Shared by the latency clients: a monotonic clock and the one-line report the bench scripts
 * read ("p50_us p99_us max_us count"). */
#ifndef PROPBUS_BENCH_LATENCY_H
#define PROPBUS_BENCH_LATENCY_H
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline long long now_ns(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static inline int compare_ns(const void *a, const void *b) {
    long long x = *(const long long *)a, y = *(const long long *)b;
    return (x > y) - (x < y);
}

/* Sorts lat (n nanosecond samples) and prints p50, p99 and max in microseconds, and n. */
static inline void report_latencies(long long *lat, int n) {
    qsort(lat, (size_t)n, sizeof *lat, compare_ns);
    printf("%.1f %.1f %.1f %d\n", lat[n / 2] / 1000.0, lat[(n * 99) / 100] / 1000.0, lat[n - 1] / 1000.0, n);
}
#endif
