/* etcd's own latencies through its HTTP/1.1 JSON gateway, with libcurl as propbusd uses it
 * (reused handles, TCP_NODELAY, no Expect: 100-continue), as the reference for bench/fleet.sh.
 * Prints one line: "p50_us p99_us max_us count".
 *
 * usage: etcd-latency watch URL KEY N   put KEY → the event arriving on a watch of KEY
 *                                       (one long-lived /v3/watch stream on its own thread)
 *        etcd-latency txn URL KEY N     a txn comparing KEY's mod_revision and putting KEY,
 *                                       until its answer (the least a fleet Set needs)
 *        etcd-latency fleettxn URL KEY N  the txn propbusd sends for one Set: compares on the
 *                                       mod_revision of KEY/defs and KEY/keys, a put of
 *                                       KEY/keys, and gets of both in the failure branch
 *        etcd-latency fleetwatch URL KEY N  that txn → the event arriving on the second of two
 *                                       watches of KEY/keys (hosts A and B each watch): what
 *                                       etcd alone needs for one fleet change, with hosts and
 *                                       buses that cost nothing
 *        etcd-latency txnrate URL KEY CLIENTS N  CLIENTS threads, each with a handle of its own,
 *                                       each sending N txns of propbusd's shape (fleettxn) on
 *                                       its own key (KEY0, KEY1, …), one after the other:
 *                                       prints "txns_per_s p50_us p99_us count" over all
 * URL is http://HOST:PORT. */
#include <curl/curl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "latency.h"

static const char *url_base;

static void base64(const char *in, size_t n, char *out) {
    static const char t[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned char)in[i] << 16;
        if (i + 1 < n) v |= (unsigned char)in[i + 1] << 8;
        if (i + 2 < n) v |= (unsigned char)in[i + 2];
        out[o++] = t[(v >> 18) & 63];
        out[o++] = t[(v >> 12) & 63];
        out[o++] = i + 1 < n ? t[(v >> 6) & 63] : '=';
        out[o++] = i + 2 < n ? t[v & 63] : '=';
    }
    out[o] = 0;
}

/* A growing response buffer. */
struct buffer { char *data; size_t len, cap; };

static size_t append(char *ptr, size_t size, size_t nmemb, void *userdata) {
    struct buffer *b = userdata;
    size_t n = size * nmemb;
    if (b->len + n + 1 > b->cap) {
        b->cap = (b->len + n + 1) * 2;
        b->data = realloc(b->data, b->cap);
    }
    memcpy(b->data + b->len, ptr, n);
    b->len += n;
    b->data[b->len] = 0;
    return n;
}

static CURL *handle(struct curl_slist **headers) {
    CURL *c = curl_easy_init();
    *headers = curl_slist_append(NULL, "Content-Type: application/json");
    *headers = curl_slist_append(*headers, "Expect:");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, *headers);
    curl_easy_setopt(c, CURLOPT_TCP_NODELAY, 1L);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    return c;
}

/* POSTs body to path on a reused handle; returns the response body (in b). */
static void post(CURL *c, const char *path, const char *body, struct buffer *b) {
    char url[256];
    snprintf(url, sizeof url, "%s%s", url_base, path);
    b->len = 0;
    if (b->data) b->data[0] = 0;
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, append);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, b);
    CURLcode rc = curl_easy_perform(c);
    long status = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, &status);
    if (rc != CURLE_OK || status != 200) {
        fprintf(stderr, "etcd-latency: %s: %s (HTTP %ld) %s\n", path, curl_easy_strerror(rc), status, b->data ? b->data : "");
        exit(1);
    }
}

/* The watch threads' view: the value they wait for, and per watch when it was seen. */
static pthread_mutex_t lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t changed = PTHREAD_COND_INITIALIZER;
static char expected[192];
struct watcher { long long seen_ns; int created; struct buffer line; };
static struct watcher watchers[2];
static char key64[400];

static size_t on_watch(char *ptr, size_t size, size_t nmemb, void *userdata) {
    struct watcher *w = userdata;
    size_t n = size * nmemb;
    long long now = now_ns();
    for (size_t i = 0; i < n; i++) {
        if (ptr[i] != '\n') { append(ptr + i, 1, 1, &w->line); continue; }
        pthread_mutex_lock(&lock);
        if (w->line.data && strstr(w->line.data, "\"created\":true")) w->created = 1;
        if (w->line.data && expected[0] && !w->seen_ns && strstr(w->line.data, expected)) w->seen_ns = now;
        pthread_cond_broadcast(&changed);
        pthread_mutex_unlock(&lock);
        w->line.len = 0;
        if (w->line.data) w->line.data[0] = 0;
    }
    return n;
}

static void *watch_thread(void *arg) {
    struct curl_slist *headers;
    CURL *c = handle(&headers);
    char url[256], body[512];
    snprintf(url, sizeof url, "%s/v3/watch", url_base);
    snprintf(body, sizeof body, "{\"create_request\":{\"key\":\"%s\"}}", key64);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_POSTFIELDS, body);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_watch);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, arg);
    curl_easy_perform(c);
    fprintf(stderr, "etcd-latency: the watch ended\n");
    exit(1);
}

/* Starts count watches of key64 (each its own stream and thread) and waits until all are created. */
static void start_watches(int count) {
    for (int i = 0; i < count; i++) {
        pthread_t thread;
        pthread_create(&thread, NULL, watch_thread, &watchers[i]);
    }
    pthread_mutex_lock(&lock);
    for (int i = 0; i < count; i++)
        while (!watchers[i].created) pthread_cond_wait(&changed, &lock);
    pthread_mutex_unlock(&lock);
}

/* The next value the watches wait for (base64, as the events carry it). */
static void expect(const char *value64) {
    pthread_mutex_lock(&lock);
    snprintf(expected, sizeof expected, "\"value\":\"%s\"", value64);
    for (int i = 0; i < 2; i++) watchers[i].seen_ns = 0;
    pthread_mutex_unlock(&lock);
}

/* Waits until each of the first count watches saw the expected value; returns when the last
 * watch (B's, for two; A's is the load of the writing host's own watch) saw it. */
static long long wait_seen(int count) {
    pthread_mutex_lock(&lock);
    for (int i = 0; i < count; i++)
        while (!watchers[i].seen_ns) pthread_cond_wait(&changed, &lock);
    long long seen = watchers[count - 1].seen_ns;
    expected[0] = 0;
    pthread_mutex_unlock(&lock);
    return seen;
}

/* The number following "name":" in json (etcd sends int64 as strings), or 0. */
static long long number(const char *json, const char *name) {
    char pattern[64];
    snprintf(pattern, sizeof pattern, "\"%s\":\"", name);
    const char *at = json ? strstr(json, pattern) : NULL;
    return at ? atoll(at + strlen(pattern)) : 0;
}

/* POSTs the txn body; dies unless it succeeded; returns the revision it made. */
static long long txn(CURL *c, const char *body, struct buffer *response, int i) {
    post(c, "/v3/kv/txn", body, response);
    if (!strstr(response->data, "\"succeeded\":true")) {
        fprintf(stderr, "etcd-latency: txn %d failed: %s\n", i, response->data);
        exit(1);
    }
    return number(response->data, "revision");
}

/* The txn propbusd sends for one Set: compares on the definition's and the value's mod_revision,
 * a put of the value, and gets of both in the failure branch. */
static void fleet_txn_body(char *body, size_t size, const char *defs64, long long def_revision, const char *keys64,
                           long long revision, const char *value64) {
    snprintf(body, size,
             "{\"compare\":[{\"key\":\"%s\",\"target\":\"MOD\",\"mod_revision\":\"%lld\"},"
             "{\"key\":\"%s\",\"target\":\"MOD\",\"mod_revision\":\"%lld\"}],"
             "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\"}}],"
             "\"failure\":[{\"request_range\":{\"key\":\"%s\"}},{\"request_range\":{\"key\":\"%s\"}}]}",
             defs64, def_revision, keys64, revision, keys64, value64, defs64, keys64);
}

struct client { char key[200]; int n; long long *lat; };

/* One txnrate client: propbusd's txn shape for one Set, flat out on its own key. */
static void *txn_flat_out(void *arg) {
    struct client *cl = arg;
    struct curl_slist *headers;
    CURL *c = handle(&headers);
    struct buffer response = {0};
    char defs[256], keys[256], defs64[400], keys64[400], body[4096], value[64], value64[128];
    snprintf(defs, sizeof defs, "%s/defs", cl->key);
    snprintf(keys, sizeof keys, "%s/keys", cl->key);
    base64(defs, strlen(defs), defs64);
    base64(keys, strlen(keys), keys64);
    snprintf(body, sizeof body, "{\"key\":\"%s\",\"value\":\"ZGVm\"}", defs64);
    post(c, "/v3/kv/put", body, &response);
    long long def_revision = number(response.data, "revision");
    snprintf(body, sizeof body, "{\"key\":\"%s\"}", keys64);
    post(c, "/v3/kv/range", body, &response);
    long long revision = number(response.data, "mod_revision");
    long long base = now_ns();
    for (int i = 0; i < cl->n; i++) {
        snprintf(value, sizeof value, "v%lld-%d", base, i);
        base64(value, strlen(value), value64);
        fleet_txn_body(body, sizeof body, defs64, def_revision, keys64, revision, value64);
        long long start = now_ns();
        revision = txn(c, body, &response, i);
        cl->lat[i] = now_ns() - start;
    }
    return NULL;
}

static int txnrate(const char *key, int clients, int n) {
    struct client *cl = calloc((size_t)clients, sizeof *cl);
    pthread_t *threads = calloc((size_t)clients, sizeof *threads);
    long long *lat = calloc((size_t)(clients * n), sizeof *lat);
    long long start = now_ns();
    for (int i = 0; i < clients; i++) {
        snprintf(cl[i].key, sizeof cl[i].key, "%s%d", key, i);
        cl[i].n = n;
        cl[i].lat = lat + (size_t)i * (size_t)n;
        pthread_create(&threads[i], NULL, txn_flat_out, &cl[i]);
    }
    for (int i = 0; i < clients; i++) pthread_join(threads[i], NULL);
    double seconds = (now_ns() - start) / 1e9;
    int total = clients * n;
    qsort(lat, (size_t)total, sizeof *lat, compare_ns);
    printf("%.0f %.1f %.1f %d\n", total / seconds, lat[total / 2] / 1000.0, lat[(total * 99) / 100] / 1000.0, total);
    return 0;
}

int main(int argc, char **argv) {
    if (argc == 6 && strcmp(argv[1], "txnrate") == 0) {
        url_base = argv[2];
        curl_global_init(CURL_GLOBAL_DEFAULT);
        return txnrate(argv[3], atoi(argv[4]), atoi(argv[5]));
    }
    if (argc != 5 || (strcmp(argv[1], "watch") != 0 && strcmp(argv[1], "txn") != 0 && strcmp(argv[1], "fleettxn") != 0
                      && strcmp(argv[1], "fleetwatch") != 0)) {
        fprintf(stderr, "usage: %s watch|txn|fleettxn|fleetwatch URL KEY N\n"
                        "       %s txnrate URL KEY CLIENTS N\n", argv[0], argv[0]);
        return 64;
    }
    url_base = argv[2];
    const char *key = argv[3];
    int n = atoi(argv[4]);
    base64(key, strlen(key), key64);
    curl_global_init(CURL_GLOBAL_DEFAULT);
    struct curl_slist *headers;
    CURL *c = handle(&headers);
    struct buffer response = {0};
    long long *lat = calloc((size_t)n, sizeof *lat);
    char body[4096], value[64], value64[128];
    long long base = now_ns();

    if (strcmp(argv[1], "watch") == 0) {
        start_watches(1);
        for (int i = 0; i < n; i++) {
            snprintf(value, sizeof value, "v%lld-%d", base, i);
            base64(value, strlen(value), value64);
            expect(value64);
            snprintf(body, sizeof body, "{\"key\":\"%s\",\"value\":\"%s\"}", key64, value64);
            long long start = now_ns();
            post(c, "/v3/kv/put", body, &response);
            lat[i] = wait_seen(1) - start;
        }
    } else if (strcmp(argv[1], "fleettxn") == 0 || strcmp(argv[1], "fleetwatch") == 0) {
        char defs[256], keys[256], defs64[400], keys64[400];
        snprintf(defs, sizeof defs, "%s/defs", key);
        snprintf(keys, sizeof keys, "%s/keys", key);
        base64(defs, strlen(defs), defs64);
        base64(keys, strlen(keys), keys64);
        int watches = strcmp(argv[1], "fleetwatch") == 0 ? 2 : 0;
        if (watches) {
            memcpy(key64, keys64, sizeof keys64);
            start_watches(watches);
        }
        snprintf(body, sizeof body, "{\"key\":\"%s\",\"value\":\"ZGVm\"}", defs64);
        post(c, "/v3/kv/put", body, &response);
        long long def_revision = number(response.data, "revision");
        snprintf(body, sizeof body, "{\"key\":\"%s\"}", keys64);
        post(c, "/v3/kv/range", body, &response);
        long long revision = number(response.data, "mod_revision");
        for (int i = 0; i < n; i++) {
            snprintf(value, sizeof value, "v%lld-%d", base, i);
            base64(value, strlen(value), value64);
            fleet_txn_body(body, sizeof body, defs64, def_revision, keys64, revision, value64);
            if (watches) expect(value64);
            long long start = now_ns();
            revision = txn(c, body, &response, i);
            lat[i] = (watches ? wait_seen(watches) : now_ns()) - start;
        }
    } else {
        snprintf(body, sizeof body, "{\"key\":\"%s\"}", key64);
        post(c, "/v3/kv/range", body, &response);
        long long revision = number(response.data, "mod_revision");
        for (int i = 0; i < n; i++) {
            snprintf(value, sizeof value, "v%lld-%d", base, i);
            base64(value, strlen(value), value64);
            snprintf(body, sizeof body,
                     "{\"compare\":[{\"key\":\"%s\",\"target\":\"MOD\",\"mod_revision\":\"%lld\"}],"
                     "\"success\":[{\"request_put\":{\"key\":\"%s\",\"value\":\"%s\"}}]}",
                     key64, revision, key64, value64);
            long long start = now_ns();
            revision = txn(c, body, &response, i);
            lat[i] = now_ns() - start;
        }
    }
    report_latencies(lat, n);
    return 0;
}
