#ifndef PROPBUS_CCURL_SHIM_H
#define PROPBUS_CCURL_SHIM_H
#include <curl/curl.h>

/* Nothing links libcurl: the Etcd target opens it with dlopen when the first client is made
 * (Etcd/Client/LibCurl.swift), so a program that never makes one (propbusd without --fleet) never
 * maps it and the libraries it needs. These are the types it casts what dlsym returns to. */

typedef CURLcode (*pb_curl_global_init_fn)(long flags);
typedef CURL *(*pb_curl_easy_init_fn)(void);
typedef void (*pb_curl_easy_cleanup_fn)(CURL *handle);
typedef CURLcode (*pb_curl_easy_perform_fn)(CURL *handle);
typedef const char *(*pb_curl_easy_strerror_fn)(CURLcode code);
typedef struct curl_slist *(*pb_curl_slist_append_fn)(struct curl_slist *list, const char *line);
typedef void (*pb_curl_slist_free_all_fn)(struct curl_slist *list);
typedef CURLM *(*pb_curl_multi_init_fn)(void);
typedef CURLMcode (*pb_curl_multi_cleanup_fn)(CURLM *multi);
/* curl_multi_add_handle and curl_multi_remove_handle. */
typedef CURLMcode (*pb_curl_multi_handle_fn)(CURLM *multi, CURL *handle);
typedef CURLMcode (*pb_curl_multi_perform_fn)(CURLM *multi, int *running);
typedef CURLMcode (*pb_curl_multi_poll_fn)(CURLM *multi, struct curl_waitfd *extra, unsigned int count, int timeout, int *ready);
typedef CURLMcode (*pb_curl_multi_wakeup_fn)(CURLM *multi);
typedef CURLMsg *(*pb_curl_multi_info_read_fn)(CURLM *multi, int *pending);
typedef curl_version_info_data *(*pb_curl_version_info_fn)(CURLversion age);

/* curl_easy_setopt, curl_easy_getinfo and curl_multi_setopt are variadic, so Swift cannot call
 * them. One non-variadic wrapper per argument type the Etcd target uses; each calls the
 * function `fn` (the dlsym'd pointer) as the variadic function it is. */

/** The shape of CURLOPT_WRITEFUNCTION and CURLOPT_HEADERFUNCTION. */
typedef size_t (*pb_curl_data_callback)(char *data, size_t size, size_t count, void *user);

typedef CURLcode (*pb_curl_setopt_fn)(CURL *, CURLoption, ...);
typedef CURLcode (*pb_curl_getinfo_fn)(CURL *, CURLINFO, ...);
typedef CURLMcode (*pb_curl_multi_setopt_fn)(CURLM *, CURLMoption, ...);

static inline CURLcode pb_curl_setopt_long(void *fn, CURL *handle, CURLoption option, long value) {
    return ((pb_curl_setopt_fn)fn)(handle, option, value);
}

static inline CURLcode pb_curl_setopt_ptr(void *fn, CURL *handle, CURLoption option, void *value) {
    return ((pb_curl_setopt_fn)fn)(handle, option, value);
}

static inline CURLcode pb_curl_setopt_str(void *fn, CURL *handle, CURLoption option, const char *value) {
    return ((pb_curl_setopt_fn)fn)(handle, option, value);
}

static inline CURLcode pb_curl_setopt_off(void *fn, CURL *handle, CURLoption option, curl_off_t value) {
    return ((pb_curl_setopt_fn)fn)(handle, option, value);
}

static inline CURLcode pb_curl_setopt_callback(void *fn, CURL *handle, CURLoption option, pb_curl_data_callback value) {
    return ((pb_curl_setopt_fn)fn)(handle, option, value);
}

static inline CURLcode pb_curl_getinfo_long(void *fn, CURL *handle, CURLINFO info, long *value) {
    return ((pb_curl_getinfo_fn)fn)(handle, info, value);
}

static inline CURLcode pb_curl_getinfo_off(void *fn, CURL *handle, CURLINFO info, curl_off_t *value) {
    return ((pb_curl_getinfo_fn)fn)(handle, info, value);
}

static inline CURLMcode pb_curl_multi_setopt_long(void *fn, CURLM *multi, CURLMoption option, long value) {
    return ((pb_curl_multi_setopt_fn)fn)(multi, option, value);
}

#endif
