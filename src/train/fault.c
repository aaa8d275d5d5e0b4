/* ZAYAC_FAULT (see fault.h): parsed once, fired where a rank reaches a fault's step, recorded in
 * ZAYAC_FAULT_STATE first so that the supervisor's restart of the run does not fire it again. */
#include "train/fault.h"
#include "base/err.h"
#include "base/fileio.h"
#include "ops/ops.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

typedef enum {
    F_KILL,
    F_EXIT,
    F_HANG,
    F_NAN,
    F_SPIKE,
    F_CORRUPT,
    F_ENOSPC,
    F_DIVERGE,
    F_KINDS
} fault_kind;

static const char *const kind_names[F_KINDS] = {
    "kill", "exit", "hang", "nan", "spike", "corrupt-checkpoint", "enospc", "diverge"};

typedef struct {
    int index; /* its place in the list: a fault listed twice fires twice */
    fault_kind kind;
    int rank;
    long long step; /* -1: the first step (or save) the run reaches */
} fault_spec;

enum { MAX_FAULTS = 16 };
static fault_spec faults[MAX_FAULTS];
static int n_faults;
static pthread_once_t parsed = PTHREAD_ONCE_INIT;

/* A malformed variable is the test's own bad input: say so and exit 2 (the CLI's bad input). */
static void bad_spec(const char *spec, const char *why) {
    fprintf(stderr,
            "ZAYAC_FAULT: '%s': %s (KIND[:rank=R][:step=S], kinds: kill, exit, hang, nan, "
            "spike, corrupt-checkpoint, enospc, diverge)\n",
            spec, why);
    _exit(2);
}

static void parse_one(char *spec) {
    if (n_faults == MAX_FAULTS) bad_spec(spec, "more than 16 faults");
    fault_spec *f = &faults[n_faults];
    f->index = n_faults++;
    f->rank = 0;
    f->step = -1;
    char *save = NULL, *part = strtok_r(spec, ":", &save);
    f->kind = F_KINDS;
    for (int k = 0; part && k < F_KINDS; k++)
        if (!strcmp(part, kind_names[k])) f->kind = (fault_kind)k;
    if (f->kind == F_KINDS) bad_spec(part ? part : "", "unknown kind");
    while ((part = strtok_r(NULL, ":", &save)) != NULL) {
        char *end;
        if (!strncmp(part, "rank=", 5)) {
            f->rank = (int)strtol(part + 5, &end, 10);
        } else if (!strncmp(part, "step=", 5)) {
            f->step = strtoll(part + 5, &end, 10);
        } else {
            bad_spec(part, "expected rank=R or step=S");
            return;
        }
        if (*end || end == part + 5) bad_spec(part, "not an integer");
    }
}

static void parse_all(void) {
    const char *v = getenv("ZAYAC_FAULT");
    if (!v || !*v) return;
    char *copy = zy_strdup(v), *save = NULL;
    for (char *spec = strtok_r(copy, ",", &save); spec; spec = strtok_r(NULL, ",", &save))
        parse_one(spec);
    free(copy);
}

/* Whether fault f fires now: its rank, its step, and (under a supervisor) not fired before in
 * this supervised run. The record is written before the fault acts: a killed rank cannot. */
static int fires(const fault_spec *f, long long step, int rank) {
    if (f->rank != rank || (f->step >= 0 && f->step != step)) return 0;
    const char *state = getenv("ZAYAC_FAULT_STATE");
    if (!state || !*state) return 1;
    char path[4096 + 128];
    snprintf(path, sizeof path, "%s/%d.%s.rank_%d.step_%lld", state, f->index, kind_names[f->kind],
             f->rank, f->step);
    zy_mkdirs(state);
    int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
    if (fd < 0) {
        if (errno != EEXIST)
            fprintf(stderr, "ZAYAC_FAULT: cannot record %s: %s\n", path, strerror(errno));
        return 0;
    }
    char line[64];
    const int n = snprintf(line, sizeof line, "%lld\n", step);
    if (write(fd, line, (size_t)n) != n) fprintf(stderr, "ZAYAC_FAULT: short write to %s\n", path);
    close(fd);
    return 1;
}

static const fault_spec *find(fault_kind kind, long long step, int rank) {
    pthread_once(&parsed, parse_all);
    for (int i = 0; i < n_faults; i++)
        if (faults[i].kind == kind && fires(&faults[i], step, rank)) return &faults[i];
    return NULL;
}

static void announce(fault_kind kind, long long step, int rank) {
    fprintf(stderr, "ZAYAC_FAULT: injecting %s on rank %d at step %lld\n", kind_names[kind], rank,
            step);
    fflush(NULL);
}

void fault_at_step(zy_step *s, long long step, int rank) {
    if (!getenv("ZAYAC_FAULT")) return;
    if (find(F_KILL, step, rank)) {
        announce(F_KILL, step, rank);
        raise(SIGKILL);
    }
    if (find(F_EXIT, step, rank)) {
        announce(F_EXIT, step, rank);
        _exit(1); /* abrupt, as a crashing rank: no clean-up */
    }
    if (find(F_HANG, step, rank)) {
        announce(F_HANG, step, rank);
        for (;;) pause(); /* alive, making no progress; a stop signal's flag is never read */
    }
    if (find(F_NAN, step, rank)) {
        announce(F_NAN, step, rank);
        const float nan_value = NAN; /* one weight: the forward's loss becomes non-finite */
        ops_copy(s->model.ctx, s->model.params, &nan_value, sizeof nan_value);
        model_sync_compute_weights(&s->model);
    }
    if (find(F_DIVERGE, step, rank)) {
        announce(F_DIVERGE, step, rank);
        /* one finite weight every rank keeps (the table's first: the embedding) moved by 0.1%,
         * on this rank only, as a silent replica divergence would */
        float w;
        ops_copy(s->model.ctx, &w, s->model.params, sizeof w);
        w += 1e-3f * (fabsf(w) > 1e-3f ? fabsf(w) : 1e-3f);
        ops_copy(s->model.ctx, s->model.params, &w, sizeof w);
        model_sync_compute_weights(&s->model);
    }
    if (find(F_SPIKE, step, rank)) {
        announce(F_SPIKE, step, rank);
        /* this rank's share of the loss: about 100 x the step's loss once summed over the ranks */
        s->fault_loss_scale = 100.0 * (s->comm ? s->comm->world : 1);
    }
}

int fault_checkpoint_write(long long step, int rank) {
    if (!getenv("ZAYAC_FAULT") || !find(F_ENOSPC, step, rank)) return ZY_OK;
    announce(F_ENOSPC, step, rank);
    return zy_fail_runtime("writing checkpoint step %lld: No space left on device (injected by "
                           "ZAYAC_FAULT=enospc)",
                           step);
}

/* Inverts 64 bytes in the middle of the first weights file of dir/model. */
static void corrupt_weights(const char *dir) {
    char model[4096 + 64], file[4096 + 400];
    snprintf(model, sizeof model, "%s/model", dir);
    DIR *d = opendir(model);
    struct dirent *e;
    file[0] = 0;
    while (d && (e = readdir(d)) != NULL)
        if (strstr(e->d_name, ".safetensors") && !strstr(e->d_name, ".json")) {
            snprintf(file, sizeof file, "%s/%s", model, e->d_name);
            break;
        }
    if (d) closedir(d);
    struct stat st;
    int fd = file[0] ? open(file, O_RDWR) : -1;
    if (fd < 0 || fstat(fd, &st) != 0 || st.st_size < 128) {
        fprintf(stderr, "ZAYAC_FAULT: no weights file to corrupt under %s\n", model);
        if (fd >= 0) close(fd);
        return;
    }
    unsigned char buf[64];
    const off_t at = st.st_size / 2;
    if (pread(fd, buf, sizeof buf, at) == (ssize_t)sizeof buf) {
        for (size_t i = 0; i < sizeof buf; i++) buf[i] ^= 0xff;
        if (pwrite(fd, buf, sizeof buf, at) != (ssize_t)sizeof buf)
            fprintf(stderr, "ZAYAC_FAULT: cannot write %s\n", file);
    }
    close(fd);
}

void fault_checkpoint_written(const char *dir, long long step) {
    if (!getenv("ZAYAC_FAULT") || !find(F_CORRUPT, step, 0)) return;
    announce(F_CORRUPT, step, 0);
    corrupt_weights(dir);
}
