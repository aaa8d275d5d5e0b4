/* Errors and checks: the two tiers and the exit statuses.
 * Operational errors are reported with zy_fail() (bad input: missing or malformed files, impossible
 * settings) or zy_fail_runtime() (the environment failed: a write, a device, a peer). Each records
 * one message and its kind per thread and returns ZY_ERR, so callers can clean up and pass the
 * status up; the CLI prints the message and exits with zy_err_exit_status().
 * Programming errors (a broken invariant) abort through ZY_CHECK with file:line, the statement and
 * the process's rank and step (zy_err_set_rank/zy_err_set_step). A library call that fails where no
 * caller can recover (inside a training step) ends the process through zy_fatal_runtime: the
 * message, then exit status ZY_EXIT_RUNTIME. Library status checks live in base/check.h.
 */
#ifndef ZY_ERR_H
#define ZY_ERR_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum { ZY_OK = 0, ZY_ERR = -1 } zy_status;

/* The process exit statuses (the contract a supervisor relies on; README "Exit statuses"). */
typedef enum {
    ZY_EXIT_OK = 0,      /* finished */
    ZY_EXIT_RUNTIME = 1, /* runtime failure: a retry from the last checkpoint may help */
    ZY_EXIT_INPUT = 2,   /* bad input or usage: do not retry */
    ZY_EXIT_STOPPED = 3  /* stopped on request after writing a checkpoint */
} zy_exit_status;

/* Records a formatted bad-input error message for this thread; returns ZY_ERR. */
int zy_fail(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* Records a formatted runtime error (I/O, device, peer: a retry may help); returns ZY_ERR. */
int zy_fail_runtime(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The exit status the thread's last error calls for (ZY_EXIT_INPUT or ZY_EXIT_RUNTIME). */
zy_exit_status zy_err_exit_status(void);
/* Prefixes the current error message with more context ("loading x: " + old message); the
 * error's kind is kept. */
int zy_fail_ctx(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The last error message of this thread ("" when none). */
const char *zy_errmsg(void);
/* Clears the thread's error message. */
void zy_err_clear(void);

/* The rank and step fatal messages name (process-wide; dist sets the rank, the training step the
 * step; -1 = unknown). */
void zy_err_set_rank(int rank);
void zy_err_set_step(long long step);
/* Writes " [rank R, step S]" (the parts known) into buf; "" when neither is set. */
void zy_err_context(char *buf, size_t n);

/* Aborts with file:line, the failed statement, rank and step; for invariants, never for bad
 * input. */
void zy_abort_at(const char *file, int line, const char *what, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));
/* Ends the process with ZY_EXIT_RUNTIME after a message naming file:line, the call, rank and
 * step: a library call failed where no caller can recover (a device error inside a step). */
void zy_fatal_runtime_at(const char *file, int line, const char *what, const char *fmt, ...)
    __attribute__((noreturn, format(printf, 4, 5)));
/* The same with ZY_EXIT_INPUT: a setting asks for what this machine cannot do, found where no
 * caller can recover (cuda.attention = cudnn on a shape cuDNN refuses, inside a step); a retry
 * would fail the same way. */
void zy_fatal_input_at(const char *file, int line, const char *what, const char *fmt, ...)
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

/* Allocation that ends the process on out-of-memory with a message and ZY_EXIT_RUNTIME (host
 * memory exhaustion is not recoverable here, and it is the machine's state, not a bug: sizes that
 * could not fit are refused before allocating, see train/memory.h). */
void *zy_malloc(size_t n);
void *zy_calloc(size_t count, size_t size);
void *zy_realloc(void *p, size_t n);
char *zy_strdup(const char *s);

#ifdef __cplusplus
}
#endif

#endif
