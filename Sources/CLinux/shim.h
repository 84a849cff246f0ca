#ifndef PROPBUS_CLINUX_SHIM_H
#define PROPBUS_CLINUX_SHIM_H
#include <sys/prctl.h>
#include <malloc.h>

/* prctl(2) is variadic, which Swift does not import: a fixed-argument wrapper. */
static inline int propbus_set_child_subreaper(int on) {
    return prctl(PR_SET_CHILD_SUBREAPER, (unsigned long)on, 0UL, 0UL, 0UL);
}

/* mallopt(3)'s M_MMAP_THRESHOLD, fixed: glibc no longer raises it after a large free. */
static inline int propbus_fix_mmap_threshold(int bytes) {
    return mallopt(M_MMAP_THRESHOLD, bytes);
}
#endif
