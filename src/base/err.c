/* Thread-local error messages and fatal checks (see err.h). */
#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static _Thread_local char err_msg[1024];
static _Thread_local zy_exit_status err_kind = ZY_EXIT_INPUT;
/* The rank and step are the process's (every thread's fatal message names them, OpenMP workers
 * and the watchdog included); atomics because one thread sets them while another may read. */
static _Atomic int err_rank = -1;
static _Atomic long long err_step = -1;

/* Records the message and its kind for this thread. */
static int record(zy_exit_status kind, const char *fmt, va_list ap) {
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    err_kind = kind;
    return ZY_ERR;
}

int zy_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    record(ZY_EXIT_INPUT, fmt, ap);
    va_end(ap);
    return ZY_ERR;
}

int zy_fail_runtime(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    record(ZY_EXIT_RUNTIME, fmt, ap);
    va_end(ap);
    return ZY_ERR;
}

zy_exit_status zy_err_exit_status(void) {
    return err_kind;
}

int zy_fail_ctx(const char *fmt, ...) {
    char prefix[512], old[sizeof err_msg];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(prefix, sizeof prefix, fmt, ap);
    va_end(ap);
    memcpy(old, err_msg, sizeof old);
    snprintf(err_msg, sizeof err_msg, "%.400s: %.600s", prefix, old);
    return ZY_ERR;
}

const char *zy_errmsg(void) {
    return err_msg;
}

void zy_err_clear(void) {
    err_msg[0] = 0;
    err_kind = ZY_EXIT_INPUT;
}

void zy_err_set_rank(int rank) {
    err_rank = rank;
}

void zy_err_set_step(long long step) {
    err_step = step;
}

void zy_err_context(char *buf, size_t n) {
    if (err_rank >= 0 && err_step >= 0)
        snprintf(buf, n, " [rank %d, step %lld]", err_rank, err_step);
    else if (err_rank >= 0)
        snprintf(buf, n, " [rank %d]", err_rank);
    else if (err_step >= 0)
        snprintf(buf, n, " [step %lld]", err_step);
    else if (n)
        buf[0] = 0;
}

/* "zayac: fatal [rank R, step S] at file:line: what: message" on stderr. */
static void fatal_message(const char *file, int line, const char *what, const char *fmt,
                          va_list ap) {
    char where[64];
    zy_err_context(where, sizeof where);
    fflush(stdout);
    fprintf(stderr, "zayac: fatal%s at %s:%d: %s: ", where, file, line, what);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    fflush(stderr);
}

void zy_abort_at(const char *file, int line, const char *what, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fatal_message(file, line, what, fmt, ap);
    va_end(ap);
    abort();
}

void zy_fatal_runtime_at(const char *file, int line, const char *what, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fatal_message(file, line, what, fmt, ap);
    va_end(ap);
    /* _exit: after a device failure, library teardown in atexit handlers can hang */
    _exit(ZY_EXIT_RUNTIME);
}

void zy_fatal_input_at(const char *file, int line, const char *what, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    fatal_message(file, line, what, fmt, ap);
    va_end(ap);
    _exit(ZY_EXIT_INPUT); /* as above: no teardown after a device library's failure */
}

void *zy_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    if (!p)
        zy_fatal_runtime_at(__FILE__, __LINE__, "malloc", "out of host memory allocating %zu bytes",
                            n);
    return p;
}

void *zy_calloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    if (!p)
        zy_fatal_runtime_at(__FILE__, __LINE__, "calloc",
                            "out of host memory allocating %zu x %zu bytes", count, size);
    return p;
}

void *zy_realloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    if (!q)
        zy_fatal_runtime_at(__FILE__, __LINE__, "realloc",
                            "out of host memory reallocating %zu bytes", n);
    return q;
}

char *zy_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = zy_malloc(n);
    memcpy(d, s, n);
    return d;
}
