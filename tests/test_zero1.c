/* ZeRO-1's weight sharing (train/zero1.h) on CPU ranks, with a compute copy attached as a GPU
 * model has one: after the share (zero1_share_begin, _group, _end) and the forward's waits
 * (m->weights_needed, group by group) every rank's compute copy holds each owner's values (matrices
 * sent as compute copies, the rest sent in fp32 and cast by the receivers, the embedding too, which
 * the tied head reads from the compute copy), its fp32 non-matrix weights are the owner's, and
 * it keeps the fp32 masters of every entry but the other ranks' matrices. The first 2-GPU run
 * trained with a stale head on rank 1 because the embedding was sent in fp32 only. With the
 * embedding replicated (every rank updates it: dist.embedding_update = replicated) nothing
 * overwrites it, and every rank's optimizer has it; split (each rank updates a slice, the default)
 * every element is its slice's rank's. And the gradient reduces deferred for the backward stay
 * deferred through the forward's waits; the buckets then leave each owner (each slice's rank) the
 * sums over ranks, and the gradient norm counts every element once. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/timer.h"
#include "dist/comm.h"
#include "model/config.h"
#include "model/model.h"
#include "mpi_test_util.h"
#include "optim/optim.h"
#include "spawn_util.h"
#include "train/zero1.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Rank r's value of element j: distinct per rank, exact in fp32. */
static float value(int r, size_t j) {
    return (float)(r * 4096 + (int)(j % 4093)) * 0.25f;
}

enum { OWNED = 0, REPLICATED = 1, SPLIT = 2 }; /* the embedding's mode */

/* The rank whose values element j (of the whole buffer) of entry i holds after a share: its
 * owner's, this rank's own for a replicated entry, its slice's rank's for a split one. */
static int source_rank(const zy_zero1 *z, const zy_param *p, int i, size_t j) {
    if (z->split[i]) {
        const size_t k = j - p->offset, q = p->numel / (size_t)z->comm->world / 16 * 16;
        const int r = q ? (int)(k / q) : z->comm->world - 1;
        return r < z->comm->world ? r : z->comm->world - 1;
    }
    return z->replicated[i] ? z->comm->rank : z->owner[i];
}

static int child_main(int mode) {
    const int replicate = mode != OWNED;
    zy_comm c;
    if (comm_init_mpi(&c, 60) != ZY_OK) {
        fprintf(stderr, "%s\n", zy_errmsg());
        return 1;
    }
    zy_ctx ctx;
    ops_ctx_init_cpu(&ctx, 1);
    zy_config cfg;
    zy_model m;
    if (config_preset_builtin(&cfg, "tiny") != ZY_OK || model_init(&m, &cfg, &ctx, 1) != ZY_OK) {
        fprintf(stderr, "%s\n", zy_errmsg());
        return 1;
    }
    const zy_param_table *t = &m.table;
    float *compute = zy_malloc(t->total * sizeof *compute); /* as a GPU model's cparams */
    m.cparams = compute;
    zy_optim_config oc;
    optim_config_default(&oc);
    oc.use_muon = 1;
    oc.embedding_update = mode == REPLICATED ? ZY_EMB_REPLICATED
                          : mode == SPLIT    ? ZY_EMB_SPLIT
                                             : ZY_EMB_OWNER;
    zy_zero1 z;
    zero1_init(&z, &c, &m, &oc);
    int first, last, failures = 0;
    zero1_owned(&z, &first, &last);
    /* every rank's own values; the compute copy holds the entries this rank's optimizer updates
     * only (it writes those), garbage elsewhere */
    for (size_t j = 0; j < t->total; j++) m.params[j] = value(c.rank, j), compute[j] = -1.0f;
    for (int i = 0; i < t->count; i++) {
        const int own = i >= first && i < last;
        const int rep = replicate && t->items[i].kind == ZY_PARAM_EMBED;
        if (z.mine[i] != (own || rep) || z.replicated[i] != rep ||
            z.split[i] != (rep && mode == SPLIT)) {
            fprintf(stderr, "rank %d: %s: mine %d, replicated %d, split %d\n", c.rank,
                    t->items[i].name, z.mine[i], z.replicated[i], z.split[i]);
            return 1;
        }
        if (!z.mine[i]) continue;
        for (size_t j = t->items[i].offset; j < t->items[i].offset + t->items[i].numel; j++)
            if (source_rank(&z, &t->items[i], i, j) == c.rank) compute[j] = m.params[j];
    }
    /* as the step queues it: each group right after its update (optim_step_runs) */
    int share = zero1_share_begin(&z);
    for (int g = -1; share == ZY_OK && g <= cfg.num_hidden_layers; g++) zero1_share_group(&z, g);
    if (share != ZY_OK || zero1_share_end(&z) != ZY_OK) {
        fprintf(stderr, "rank %d: share: %s\n", c.rank, zy_errmsg());
        return 1;
    }
    /* the next forward waits group by group through the hook, which removes itself at the end */
    if (!m.weights_needed) {
        fprintf(stderr, "rank %d: the share installed no weights_needed hook\n", c.rank);
        return 1;
    }
    /* as the step does: the last micro-batch's gradient reduces are deferred before its forward
     * and must stay deferred through the backward, after the forward's waits have ended the
     * share's own deferral (they did not: every reduce on 2 GPUs waited on the host, and the
     * backward stood still while it ran) */
    zero1_reduce_in_backward(&z);
    for (int g = -1; g < m.cfg.num_hidden_layers && m.weights_needed; g++)
        m.weights_needed(m.weights_needed_user, g);
    /* the backward's buckets, as it makes them final: layer L-1 down to 0, then the globals */
    float *own_grads = zy_malloc(t->total * sizeof *own_grads);
    for (size_t j = 0; j < t->total; j++) m.grads[j] = own_grads[j] = value(c.rank, j);
    for (int l = m.cfg.num_hidden_layers - 1; l >= -1; l--) m.grads_ready(m.grads_ready_user, l);
    if (m.weights_needed || z.share_pending) {
        fprintf(stderr, "rank %d: the hook is still installed after the last layer\n", c.rank);
        return 1;
    }
    if (c.deferred != 1) {
        fprintf(stderr, "rank %d: after the forward's waits the backward's reduces are %s\n",
                c.rank, c.deferred ? "deferred twice" : "no longer deferred");
        failures++;
    }
    if (zero1_grads_done(&z) != ZY_OK || c.deferred != 0) {
        fprintf(stderr, "rank %d: after the backward: %s, deferral depth %d\n", c.rank, zy_errmsg(),
                c.deferred);
        failures++;
    }
    /* every element's sum over ranks (exact: multiples of 1/4 below 2^15) where this rank
     * updates it, the rank's own gradient where it does not (a reduce leaves the senders' alone);
     * the norm of the sums counts each element once (exact in double) */
    double want_sumsq = 0;
    for (int i = 0; i < t->count; i++) {
        const zy_param *p = &t->items[i];
        for (size_t j = p->offset; j < p->offset + p->numel; j++) {
            float sum = 0;
            for (int r = 0; r < c.world; r++) sum += value(r, j);
            if (p->kind != ZY_PARAM_BUFFER) want_sumsq += (double)sum * sum;
            const int src = source_rank(&z, p, i, j), updated = z.replicated[i] || src == c.rank;
            if (updated && (z.split[i] ? src == c.rank : 1) && m.grads[j] != sum) {
                fprintf(stderr, "rank %d: %s element %zu: gradient %g, want the sum %g\n", c.rank,
                        p->name, j - p->offset, m.grads[j], sum);
                failures++;
                break;
            }
            if (!updated && !z.split[i] && m.grads[j] != own_grads[j]) {
                fprintf(stderr, "rank %d: %s element %zu: another owner's gradient changed here\n",
                        c.rank, p->name, j - p->offset);
                failures++;
                break;
            }
        }
    }
    free(own_grads);
    double sumsq = -1;
    if (zero1_grad_sumsq(&z, &sumsq) != ZY_OK || sumsq != want_sumsq) {
        fprintf(stderr, "rank %d: gradient sum of squares %.17g, want %.17g (%s)\n", c.rank, sumsq,
                want_sumsq, zy_errmsg());
        failures++;
    }
    int kinds_seen[5] = {0};
    for (int i = 0; i < t->count; i++) {
        const zy_param *p = &t->items[i];
        /* a replicated entry's values are this rank's own (its update is every rank's), a split
         * one's its slice's rank's */
        const int matrix = p->kind == ZY_PARAM_MATRIX;
        int foreign = 0;
        for (size_t j = p->offset; j < p->offset + p->numel; j++) {
            const int owner = source_rank(&z, p, i, j);
            foreign |= owner != c.rank;
            const float want_fp32 = matrix ? value(c.rank, j) : value(owner, j);
            if (compute[j] != value(owner, j) || m.params[j] != want_fp32) {
                fprintf(stderr, "rank %d: %s (owner %d) element %zu: compute %g, fp32 %g\n", c.rank,
                        p->name, owner, j - p->offset, compute[j], m.params[j]);
                failures++;
                break;
            }
        }
        kinds_seen[p->kind] += foreign;
    }
    /* the fp32 masters this rank keeps (zero1_release_masters gives the rest back at set-up):
     * every entry but the other ranks' matrices, whose compute copies came from their owners */
    for (int i = 0; i < t->count; i++) {
        const int want = t->items[i].kind != ZY_PARAM_MATRIX || z.owner[i] == c.rank;
        if (zero1_keeps_master(&z, i) != want) {
            fprintf(stderr, "rank %d: %s (owner %d): master kept %d, want %d\n", c.rank,
                    t->items[i].name, z.owner[i], zero1_keeps_master(&z, i), want);
            failures++;
        }
    }
    /* the case at hand: another rank's matrices reach this one, and its embedding (or slices of
     * it) unless that is replicated */
    if (c.rank == c.world - 1 &&
        (!kinds_seen[ZY_PARAM_MATRIX] || kinds_seen[ZY_PARAM_EMBED] != (mode != REPLICATED))) {
        fprintf(stderr, "rank %d received %d matrices and %d embeddings (mode %d)\n", c.rank,
                kinds_seen[ZY_PARAM_MATRIX], kinds_seen[ZY_PARAM_EMBED], mode);
        failures++;
    }
    if (failures == 0 && c.rank == 0)
        printf(
            "zero1 on %d ranks (embedding %s): every compute copy and kept master is its owner's, "
            "every owned gradient the sum, the norm exact\n",
            c.world,
            mode == OWNED        ? "owned"
            : mode == REPLICATED ? "replicated"
                                 : "split");
    zero1_free(&z);
    m.cparams = NULL;
    free(compute);
    model_free(&m);
    comm_free(&c);
    return failures ? 1 : 0;
}

static char dir[64], self[4096], mpirun[4096];

static int setup(void **state) {
    (void)state;
    snprintf(dir, sizeof dir, "/tmp/zy_zero1_XXXXXX");
    return mpi_test_self_setup(self, sizeof self, dir);
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(dir) == ZY_OK ? 0 : -1;
}

static void run_ranks(int n, int mode) {
    if (!comm_have_mpi() || !mpi_test_find_mpirun(mpirun, sizeof mpirun)) skip();
    char np[16], md[16];
    snprintf(np, sizeof np, "%d", n);
    snprintf(md, sizeof md, "%d", mode);
    const char *args[] = {"-k", "5",           "120", mpirun, "--oversubscribe", "-n", np,
                          self, "--mpi-child", md,    NULL};
    run_result r = spawn_capture("/usr/bin/timeout", dir, args);
    if (r.code != 0) fail_msg("%d ranks: exit %d\n%s\n%s", n, r.code, r.out, r.err);
    result_free(&r);
}

static void test_share_two_ranks(void **state) {
    (void)state;
    run_ranks(2, REPLICATED);
    run_ranks(2, OWNED);
    run_ranks(2, SPLIT);
}

static void test_share_three_ranks(void **state) {
    (void)state;
    run_ranks(3, REPLICATED);
    run_ranks(3, OWNED);
    run_ranks(3, SPLIT);
}

int main(int argc, char **argv) {
    if (argc == 3 && strcmp(argv[1], "--mpi-child") == 0) return child_main(atoi(argv[2]));
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_share_two_ranks),
        cmocka_unit_test(test_share_three_ranks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
