/* Shared by the tests that run CPU ranks under Open MPI's mpirun: finding mpirun, and the
 * environment mpirun and its ranks need inside a test run. */
#ifndef ZY_MPI_TEST_UTIL_H
#define ZY_MPI_TEST_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Whether mpirun is on PATH; its path goes into buf. */
static inline int mpi_test_find_mpirun(char *buf, size_t n) {
    const char *path = getenv("PATH");
    for (const char *p = path ? path : ""; *p;) {
        size_t len = strcspn(p, ":");
        snprintf(buf, n, "%.*s/mpirun", (int)len, p);
        if (len && access(buf, X_OK) == 0) return 1;
        p += len + (p[len] == ':');
    }
    return 0;
}

/* Sets up this process's environment, which mpirun and its ranks inherit: as root, Open MPI's two
 * variables that allow it; for a sanitizer build, no leak check in the ranks (this process keeps
 * its own: options are read at start). Open MPI allocates once and never frees, from plugins it
 * unloads before the check, so its allocations cannot be named in suppressions; and with full
 * unwinding (which would name them) LeakSanitizer's tracer crashes on the dynamic TLS of a zayac
 * rank. AddressSanitizer's other checks stay on in the ranks. */
static inline void mpi_test_env(void) {
    if (geteuid() == 0) {
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    }
    char opts[1024];
    const char *old = getenv("LSAN_OPTIONS");
    snprintf(opts, sizeof opts, "%s%sdetect_leaks=0", old ? old : "", old && *old ? ":" : "");
    setenv("LSAN_OPTIONS", opts, 1);
}

/* For a test that runs itself as MPI ranks: this program's path into self and a fresh scratch
 * folder made from the mkdtemp template in dir (both of size >= 64), and the environment above.
 * 0 on success (a cmocka group setup's return). */
static inline int mpi_test_self_setup(char *self, size_t self_size, char *dir) {
    ssize_t n = readlink("/proc/self/exe", self, self_size - 1);
    if (n <= 0 || !mkdtemp(dir)) return -1;
    self[n] = 0;
    mpi_test_env();
    return 0;
}

#endif
