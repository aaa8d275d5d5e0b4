/* Local launcher: starts one process per rank on this host with the rank variables set
 * (RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT), waits for them,
 * and when one fails stops the others, so a crashed rank never leaves its peers hanging. */
#ifndef ZY_DIST_LAUNCH_H
#define ZY_DIST_LAUNCH_H

#include <signal.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
    int nprocs;                         /* ranks to start on this host */
    int nnodes;                         /* hosts of the job (0 or 1: this one alone) */
    int node_rank;                      /* this host's index: its ranks are node_rank*nprocs + i */
    const char *master_addr;            /* NULL: 127.0.0.1 */
    int master_port;                    /* 0: a free port chosen here */
    double grace_s;                     /* SIGTERM to SIGKILL delay when stopping ranks */
    volatile sig_atomic_t *stop_signal; /* set by the caller's signal handler: stop all */
    FILE *log;                          /* progress and failure lines; NULL: silent */
} dist_launch_opts;

/* The exit status of a rank that stopped on request after writing a checkpoint (the README's
 * exit status contract: 3). */
#define LAUNCH_EXIT_STOPPED 3

/* Runs argv (argv[0] found on PATH) as nprocs ranks and waits. Several hosts: each runs the
 * launcher with the same nnodes, nprocs, master_addr (node 0's) and master_port, and its own
 * node_rank; the job's world is nnodes * nprocs. When a rank fails (an exit status other than 0
 * and 3, or a signal) the others get SIGTERM, then SIGKILL after grace_s. The caller's
 * stop_signal (set by its handler; cleared here) is passed on to every rank, which then stop
 * after a checkpoint (exit 3); a second one kills them. *exit_code is the code of the first rank
 * that failed (128+N for signal N), else 3 when ranks stopped on request, else 0; 128+N when a
 * second signal N killed them. Returns ZY_ERR only when the ranks could not be started. */
int dist_launch(const dist_launch_opts *o, char *const argv[], int *exit_code);
/* A TCP port that is free on this host right now (bind to port 0 and read it back). */
int dist_free_port(int *port);

#ifdef __cplusplus
}
#endif

#endif
