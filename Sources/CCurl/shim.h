#ifndef PROPBUS_CCURL_SHIM_H
#define PROPBUS_CCURL_SHIM_H
#include <curl/curl.h>

/* curl_easy_setopt, curl_easy_getinfo and curl_multi_setopt are variadic (and macros with
 * type checks under GCC), so Swift cannot call them. One non-variadic wrapper per argument
 * type the Etcd target uses. */

/** The shape of CURLOPT_WRITEFUNCTION and CURLOPT_HEADERFUNCTION. */
typedef size_t (*pb_curl_data_callback)(char *data, size_t size, size_t count, void *user);

static inline CURLcode pb_curl_setopt_long(CURL *handle, CURLoption option, long value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode pb_curl_setopt_ptr(CURL *handle, CURLoption option, void *value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode pb_curl_setopt_str(CURL *handle, CURLoption option, const char *value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode pb_curl_setopt_off(CURL *handle, CURLoption option, curl_off_t value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode pb_curl_setopt_callback(CURL *handle, CURLoption option, pb_curl_data_callback value) {
    return curl_easy_setopt(handle, option, value);
}

static inline CURLcode pb_curl_getinfo_long(CURL *handle, CURLINFO info, long *value) {
    return curl_easy_getinfo(handle, info, value);
}

static inline CURLcode pb_curl_getinfo_off(CURL *handle, CURLINFO info, curl_off_t *value) {
    return curl_easy_getinfo(handle, info, value);
}

static inline CURLMcode pb_curl_multi_setopt_long(CURLM *multi, CURLMoption option, long value) {
    return curl_multi_setopt(multi, option, value);
}

#endif
