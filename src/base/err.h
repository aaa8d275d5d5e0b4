/* Errors and checks.
 * Operational errors (bad input, I/O) are reported with zy_fail(), which records one message per
 * thread and returns ZY_ERR, so callers can clean up and pass the status up; the CLI prints it.
 * Programming errors (a broken invariant) abort through ZY_CHECK with file:line and the statement.
 */
#ifndef ZY_ERR_H
#define ZY_ERR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ZY_OK = 0, ZY_ERR = -1 } zy_status;

/* Records a formatted error message for this thread; returns ZY_ERR. */
int zy_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Prefixes the current error message with more context ("loading x: " + old message). */
int zy_fail_ctx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The last error message of this thread ("" when none). */
const char *zy_errmsg(void);
/* Clears the thread's error message. */
void zy_err_clear(void);

/* Aborts with file:line and the failed statement; for invariants, never for bad input. */
void zy_abort_at(const char *file, int line, const char *what, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));

#define ZY_CHECK(cond)                                                                             \
    do {                                                                                           \
        if (!(cond)) zy_abort_at(__FILE__, __LINE__, #cond, "check failed");                       \
    } while (0)
#define ZY_CHECKF(cond, ...)                                                                       \
    do {                                                                                           \
        if (!(cond)) zy_abort_at(__FILE__, __LINE__, #cond, __VA_ARGS__);                          \
    } while (0)
/* Propagates a failed status to the caller. */
#define ZY_TRY(expr)                                                                               \
    do {                                                                                           \
        if ((expr) != ZY_OK) return ZY_ERR;                                                        \
    } while (0)

/* Allocation that aborts on out-of-memory (host memory exhaustion is not recoverable here). */
void *zy_malloc(size_t n);
void *zy_calloc(size_t count, size_t size);
void *zy_realloc(void *p, size_t n);
char *zy_strdup(const char *s);

#ifdef __cplusplus
}
#endif

#endif
