/* Launcher variable detection (see env.h). */
#include "dist/env.h"
#include "base/err.h"

#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

/* One launcher's variable names; local names may be NULL. */
typedef struct {
    const char *source;
    const char *rank, *world, *local_rank, *local_world;
} env_names;

static const env_names launchers[] = {
    {"RANK/WORLD_SIZE", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE"},
    {"OpenMPI", "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK",
     "OMPI_COMM_WORLD_LOCAL_SIZE"},
    {"PMI", "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"},
    {"Slurm", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_LOCALID", NULL},
};

/* Parses a non-negative int variable; absent leaves *out = def. */
static int env_int(dist_getenv_fn get, void *ctx, const char *name, int def, int *out) {
    const char *v = name ? get(name, ctx) : NULL;
    if (!v) {
        *out = def;
        return ZY_OK;
    }
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < 0 || x > INT_MAX)
        return zy_fail("environment variable %s='%s': expected a non-negative integer", name, v);
    *out = (int)x;
    return ZY_OK;
}

int dist_env_detect(dist_env *e, dist_getenv_fn get, void *ctx) {
    memset(e, 0, sizeof *e);
    e->world = 1;
    e->local_rank = 0;
    e->local_world = 1;
    e->source = "single process";
    const env_names *l = NULL;
    for (size_t i = 0; i < sizeof launchers / sizeof launchers[0] && !l; i++) {
        const char *r = get(launchers[i].rank, ctx), *w = get(launchers[i].world, ctx);
        if (!r && !w) continue;
        if (!r || !w)
            return zy_fail("environment: %s is set but %s is not (both are needed)",
                           r ? launchers[i].rank : launchers[i].world,
                           r ? launchers[i].world : launchers[i].rank);
        l = &launchers[i];
    }
    if (l) {
        e->source = l->source;
        ZY_TRY(env_int(get, ctx, l->rank, 0, &e->rank));
        ZY_TRY(env_int(get, ctx, l->world, 1, &e->world));
        ZY_TRY(env_int(get, ctx, l->local_rank, -1, &e->local_rank));
        ZY_TRY(env_int(get, ctx, l->local_world, -1, &e->local_world));
        if (e->world < 1) return zy_fail("environment: %s=0, expected at least 1", l->world);
        if (e->rank >= e->world)
            return zy_fail("environment: %s=%d is not below %s=%d", l->rank, e->rank, l->world,
                           e->world);
        if (e->local_world == 0 || (e->local_world > 0 && e->local_rank >= e->local_world))
            return zy_fail("environment: local rank %d does not fit local world size %d (%s)",
                           e->local_rank, e->local_world, l->source);
        if (e->world == 1) e->local_rank = 0, e->local_world = 1;
    }
    const char *addr = get("MASTER_ADDR", ctx);
    if (addr && *addr) {
        if (strlen(addr) >= sizeof e->master_addr)
            return zy_fail("environment: MASTER_ADDR is longer than %zu characters",
                           sizeof e->master_addr - 1);
        strcpy(e->master_addr, addr);
    } else if (e->world == 1 || e->local_world == e->world) {
        strcpy(e->master_addr, "127.0.0.1"); /* every rank is on this host */
    } else {
        return zy_fail("environment: MASTER_ADDR is not set; rank %d of %d (%s) needs the host "
                       "name or address of rank 0 in MASTER_ADDR (and a free port in MASTER_PORT)",
                       e->rank, e->world, e->source);
    }
    ZY_TRY(env_int(get, ctx, "MASTER_PORT", DIST_DEFAULT_PORT, &e->master_port));
    if (e->master_port < 1 || e->master_port > 65535)
        return zy_fail("environment: MASTER_PORT=%d is not a TCP port (1..65535)", e->master_port);
    return ZY_OK;
}

static const char *env_getenv(const char *name, void *ctx) {
    (void)ctx;
    return getenv(name);
}

int dist_env_from_environ(dist_env *e) {
    ZY_TRY(dist_env_detect(e, env_getenv, NULL));
    if (e->world > 1) zy_err_set_rank(e->rank); /* fatal messages name this process's rank */
    return ZY_OK;
}

void dist_local_from_hosts(const char *hosts, int stride, int world, int rank, int *local_rank,
                           int *local_world) {
    const char *me = hosts + (size_t)rank * stride;
    int lr = 0, lw = 0;
    for (int r = 0; r < world; r++) {
        if (strcmp(hosts + (size_t)r * stride, me) != 0) continue;
        lw++;
        if (r < rank) lr++;
    }
    *local_rank = lr;
    *local_world = lw;
}
