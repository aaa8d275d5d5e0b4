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
 * variables that allow it; for a sanitizer build, LeakSanitizer suppressions (written to
 * dir/lsan_mpi.supp) of what Open MPI allocates once and never frees, and full stack unwinding,
 * without which those allocations cannot be told apart from ours (Open MPI's libraries have no
 * frame pointers, and its plugins are unloaded before the leak check). Returns 0, or -1 when the
 * file cannot be written. */
static inline int mpi_test_env(const char *dir) {
    if (geteuid() == 0) {
        setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 1);
        setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 1);
    }
    char supp[512], opts[1024];
    snprintf(supp, sizeof supp, "%s/lsan_mpi.supp", dir);
    FILE *f = fopen(supp, "w");
    if (!f) return -1;
    /* its libraries, and the PMIx plugin's progress thread (libevent's loop calls into it) */
    fputs("leak:libmpi.so\nleak:libopen-pal.so\nleak:libopen-rte.so\nleak:libpmix.so\n"
          "leak:libevent_core\n",
          f);
    if (fclose(f) != 0) return -1;
    const char *old = getenv("LSAN_OPTIONS");
    snprintf(opts, sizeof opts, "%s%ssuppressions=%s:fast_unwind_on_malloc=0", old ? old : "",
             old && *old ? ":" : "", supp);
    setenv("LSAN_OPTIONS", opts, 1);
    return 0;
}

#endif
