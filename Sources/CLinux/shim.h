#ifndef PROPBUS_CLINUX_SHIM_H
#define PROPBUS_CLINUX_SHIM_H
#include <errno.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>
#include <malloc.h>

/* prctl(2) is variadic, which Swift does not import: a fixed-argument wrapper. */
static inline int propbus_set_child_subreaper(int on) {
    return prctl(PR_SET_CHILD_SUBREAPER, (unsigned long)on, 0UL, 0UL, 0UL);
}

/* pidfd_open(2) (Linux 5.3): a descriptor that polls readable once the process has exited.
   Through syscall(2), which is variadic too; -1 with ENOSYS where the kernel or headers lack it.
   The descriptor is always close-on-exec. */
static inline int propbus_pidfd_open(int pid) {
#ifdef SYS_pidfd_open
    return (int)syscall(SYS_pidfd_open, pid, 0);
#else
    (void)pid;
    errno = ENOSYS;
    return -1;
#endif
}

/* A non-blocking, close-on-exec eventfd(2) counter, to wake a poll(2) loop. */
static inline int propbus_wakeup_fd(void) {
    return eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
}

/* mallopt(3)'s M_MMAP_THRESHOLD, fixed: glibc no longer raises it after a large free. */
static inline int propbus_fix_mmap_threshold(int bytes) {
    return mallopt(M_MMAP_THRESHOLD, bytes);
}

/* malloc_trim(3) with no padding: the free pages of every arena go back to the kernel. */
static inline int propbus_trim_heap(void) {
    return malloc_trim(0);
}
#endif
