/* Where this process sits in a multi-process job: rank, world size, local rank and the rendezvous
 * address, read from the variables that launchers set (zayac launch and torchrun: RANK/WORLD_SIZE;
 * OpenMPI's mpirun: OMPI_COMM_WORLD_*; MPICH/Hydra: PMI_*; Slurm's srun: SLURM_*), plus
 * MASTER_ADDR/MASTER_PORT for rank 0's rendezvous server. */
#ifndef ZY_DIST_ENV_H
#define ZY_DIST_ENV_H

#ifdef __cplusplus
extern "C" {
#endif

#define DIST_DEFAULT_PORT 29500

typedef struct {
    int rank;              /* 0 .. world-1 */
    int world;             /* number of processes */
    int local_rank;        /* rank among the processes of this host; -1 = unknown (derive it) */
    int local_world;       /* processes on this host; -1 = unknown */
    char master_addr[256]; /* host name or address of rank 0's rendezvous server */
    int master_port;       /* its TCP port */
    const char *source;    /* which launcher's variables were used ("RANK", "OpenMPI", ...) */
} dist_env;

/* A variable lookup: returns the value of name or NULL (getenv, or a table in tests). */
typedef const char *(*dist_getenv_fn)(const char *name, void *ctx);

/* Fills e from the variables seen through get; a malformed or inconsistent set is an error that
 * names the variable. With no launcher variables at all the process is rank 0 of 1. */
int dist_env_detect(dist_env *e, dist_getenv_fn get, void *ctx);
/* dist_env_detect over the process environment; with several ranks, also sets the rank that this
 * thread's fatal messages name (zy_err_set_rank). */
int dist_env_from_environ(dist_env *e);
/* Local rank and local world size from every rank's host name (hosts[r*stride], NUL-terminated):
 * the local rank is the number of lower ranks on the same host. */
void dist_local_from_hosts(const char *hosts, int stride, int world, int rank, int *local_rank,
                           int *local_world);

#ifdef __cplusplus
}
#endif

#endif
