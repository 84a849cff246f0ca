#ifndef PROPBUS_CLINUX_SHIM_H
#define PROPBUS_CLINUX_SHIM_H
#include <sys/prctl.h>

/* prctl(2) is variadic, which Swift does not import: a fixed-argument wrapper. */
static inline int propbus_set_child_subreaper(int on) {
    return prctl(PR_SET_CHILD_SUBREAPER, (unsigned long)on, 0UL, 0UL, 0UL);
}
#endif
