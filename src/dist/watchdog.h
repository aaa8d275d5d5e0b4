/* Watchdog for calls that can block inside a library (a blocking NCCL call waiting for a peer):
 * while the calling thread is inside such a call (between enter and leave), a helper thread
 * checks the deadline and the control channel, and reports a stuck call or a dead peer through a
 * callback (the CLI's prints the message and ends the process, so a job never hangs silently). */
#ifndef ZY_DIST_WATCHDOG_H
#define ZY_DIST_WATCHDOG_H

#include "dist/rdv.h"

#include <pthread.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Called once, from the watchdog thread, with a one-line reason. */
typedef void (*dist_stuck_fn)(const char *msg, void *ctx);

typedef struct {
    pthread_t thread;
    int running;
    volatile int stop;
    volatile double busy_since; /* 0 = not inside a guarded call */
    const char *volatile what;  /* the guarded call, for the message */
    volatile int fired;         /* the callback was called */
    double timeout_s;
    dist_rdv *volatile rdv; /* polled for dead peers while a call is guarded; may be NULL */
    dist_stuck_fn fn;
    void *ctx;
} dist_watchdog;

/* Starts the watchdog thread (nothing is started when fn is NULL). */
int dist_watchdog_start(dist_watchdog *w, dist_rdv *rdv, double timeout_s, dist_stuck_fn fn,
                        void *ctx);
/* Marks the calling thread as inside `what` (a string literal) / out of it again. */
void dist_watchdog_enter(dist_watchdog *w, const char *what);
void dist_watchdog_leave(dist_watchdog *w);
/* Stops and joins the thread. */
void dist_watchdog_stop(dist_watchdog *w);

#ifdef __cplusplus
}
#endif

#endif
