/* Watchdog thread for blocking calls (see watchdog.h). */
#include "dist/watchdog.h"
#include "base/err.h"
#include "base/timer.h"

#include <stdio.h>
#include <string.h>
#include <time.h>

static void *watch(void *p) {
    dist_watchdog *w = p;
    while (!w->stop && !w->fired) {
        struct timespec ts = {0, 20 * 1000000L};
        nanosleep(&ts, NULL);
        double since;
        __atomic_load(&w->busy_since, &since, __ATOMIC_ACQUIRE);
        if (since <= 0) continue;
        const char *what = w->what ? w->what : "a blocking call";
        dist_rdv *rdv = w->rdv; /* once: the owner may clear it (teardown) */
        char msg[1200];
        if (zy_now() - since > w->timeout_s) {
            snprintf(msg, sizeof msg, "%s did not return within %.0f s (a peer is stuck or gone)",
                     what, w->timeout_s);
        } else if (rdv && dist_rdv_check_peers(rdv) != ZY_OK) {
            snprintf(msg, sizeof msg, "during %s: %s", what, zy_errmsg());
        } else {
            continue;
        }
        w->fired = 1;
        w->fn(msg, w->ctx);
    }
    return NULL;
}

int dist_watchdog_start(dist_watchdog *w, dist_rdv *rdv, double timeout_s, dist_stuck_fn fn,
                        void *ctx) {
    memset(w, 0, sizeof *w);
    w->timeout_s = timeout_s;
    w->rdv = rdv;
    w->fn = fn;
    w->ctx = ctx;
    if (!fn) return ZY_OK;
    if (pthread_create(&w->thread, NULL, watch, w) != 0)
        return zy_fail_runtime("watchdog: cannot start its thread");
    w->running = 1;
    return ZY_OK;
}

void dist_watchdog_enter(dist_watchdog *w, const char *what) {
    double now = zy_now();
    w->what = what;
    __atomic_store(&w->busy_since, &now, __ATOMIC_RELEASE);
}

void dist_watchdog_leave(dist_watchdog *w) {
    double zero = 0;
    __atomic_store(&w->busy_since, &zero, __ATOMIC_RELEASE);
}

void dist_watchdog_stop(dist_watchdog *w) {
    if (!w->running) return;
    w->stop = 1;
    pthread_join(w->thread, NULL);
    w->running = 0;
}
