/* The supervisor (`zayac supervise`): runs a training command and keeps it going. Exit 0 ends it;
 * exit 2 (bad input) stops it without a retry; a crash, a signal, exit 1, a hang (no heartbeat
 * for hang_timeout_s) or a divergence restarts it with --resume from the newest checkpoint that
 * verifies; a divergence at the same step twice restarts it skipping that step's batch. A stop
 * signal is passed to the command (which saves and exits 3) and ends the supervision with 3.
 * Every incident is a row of OUT/incidents.jsonl; the run's account is OUT/summary.json. */
#ifndef ZY_SUPER_SUPERVISE_H
#define ZY_SUPER_SUPERVISE_H

#include <signal.h>

typedef struct {
    const char *out_dir;      /* incidents.jsonl, summary.json, .aegis/ (its state) */
    int max_restarts;         /* restarts in a row that get no further than the furthest failure so
                                 far, before giving up (exit 1) */
    double hang_timeout_s;    /* no step for this long: hung (0: not watched) */
    double startup_timeout_s; /* the same before the first step of a run */
    double backoff_s;         /* wait before a restart, doubled after each failure
                                 that made no progress (at most 60 s) */
    double rank_window_s;     /* a rank's failures count as repeated (the run goes on with fewer
                                 ranks) only when the next comes within this many seconds */
    volatile sig_atomic_t *stop_signal; /* set by the caller's handler: pass it on, then stop */
} super_opts;

/* Runs cmd (argv[0] found on PATH) under supervision; *exit_code is the supervisor's status (0,
 * 1 after max_restarts fruitless restarts, 2 bad input, 3 stopped on request). ZY_ERR when its own
 * files cannot be written or the command cannot be started. */
int super_run(const super_opts *o, char *const cmd[], int *exit_code);

#endif
