/* Thread-local error messages and fatal checks (see err.h). */
#include "base/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static _Thread_local char err_msg[1024];

int zy_fail(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_msg, sizeof err_msg, fmt, ap);
    va_end(ap);
    return ZY_ERR;
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
}

void zy_abort_at(const char *file, int line, const char *what, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "zayac: fatal at %s:%d: %s: ", file, line, what);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    abort();
}

void *zy_malloc(size_t n) {
    void *p = malloc(n ? n : 1);
    ZY_CHECKF(p != NULL, "out of host memory allocating %zu bytes", n);
    return p;
}

void *zy_calloc(size_t count, size_t size) {
    void *p = calloc(count ? count : 1, size ? size : 1);
    ZY_CHECKF(p != NULL, "out of host memory allocating %zu x %zu bytes", count, size);
    return p;
}

void *zy_realloc(void *p, size_t n) {
    void *q = realloc(p, n ? n : 1);
    ZY_CHECKF(q != NULL, "out of host memory reallocating %zu bytes", n);
    return q;
}

char *zy_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *d = zy_malloc(n);
    memcpy(d, s, n);
    return d;
}
