/* ZeRO-1 for the training step (see zero1.h). */
#include "train/zero1.h"
#include "base/err.h"
#include "optim/clip.h"

#include <stdlib.h>
#include <string.h>

int zero1_replicates(const zy_optim_config *oc, const zy_param *p) {
    return oc->embedding_update != ZY_EMB_OWNER && p->kind == ZY_PARAM_EMBED;
}

int zero1_splits(const zy_optim_config *oc, const zy_param *p) {
    return oc->embedding_update == ZY_EMB_SPLIT && p->kind == ZY_PARAM_EMBED;
}

/* A split entry's slices: rank r < W-1 updates [r q, (r+1) q), the last rank [(W-1) q, numel);
 * q = numel / W rounded down to 16 floats, so every slice starts 64-byte aligned (the AdamW
 * kernel's vector loads) and the first W q elements are one reduce-scatter / all-gather. */
static size_t split_q(const zy_zero1 *z, const zy_param *p) {
    return p->numel / (size_t)z->comm->world / 16 * 16;
}

static void split_slice(const zy_zero1 *z, const zy_param *p, int r, size_t *lo, size_t *hi) {
    const size_t q = split_q(z, p);
    *lo = (size_t)r * q;
    *hi = r == z->comm->world - 1 ? p->numel : *lo + q;
}

/* Entry i's W q head: slice r from rank r to every rank (in place), then the tail past it from
 * the last rank: the whole entry of buf (an entry-sized array: its weights or a moment) on every
 * rank. */
static int split_gather(zy_zero1 *z, float *buf, const zy_param *p) {
    const int W = z->comm->world;
    const size_t q = split_q(z, p), head = (size_t)W * q;
    if (q) ZY_TRY(comm_all_gather(z->comm, buf + (size_t)z->comm->rank * q, buf, q, ZY_COMM_F32));
    if (p->numel > head)
        ZY_TRY(comm_broadcast(z->comm, buf + head, p->numel - head, ZY_COMM_F32, W - 1));
    return ZY_OK;
}

/* Entry i's gradient summed over ranks into each rank's own slice: a reduce-scatter of the head
 * (each link direction carries a part), then the tail reduced to the last rank. */
static int split_reduce(zy_zero1 *z, const zy_param *p) {
    const int W = z->comm->world;
    float *g = z->m->grads + p->offset;
    const size_t q = split_q(z, p), head = (size_t)W * q;
    if (q)
        ZY_TRY(comm_reduce_scatter(z->comm, g, g + (size_t)z->comm->rank * q, q, ZY_COMM_F32,
                                   ZY_COMM_SUM));
    if (p->numel > head)
        ZY_TRY(comm_reduce(z->comm, g + head, p->numel - head, ZY_COMM_F32, ZY_COMM_SUM, W - 1));
    return ZY_OK;
}

void zero1_init(zy_zero1 *z, zy_comm *comm, zy_model *m, const zy_optim_config *oc) {
    memset(z, 0, sizeof *z);
    z->comm = comm;
    z->m = m;
    const zy_param_table *t = &m->table;
    const int W = comm->world;
    z->bound = zy_calloc((size_t)W + 1, sizeof *z->bound);
    z->owner = zy_calloc((size_t)t->count + 1, sizeof *z->owner);
    z->ready_at = zy_calloc((size_t)t->count + 1, sizeof *z->ready_at);
    z->replicated = zy_calloc((size_t)t->count + 1, sizeof *z->replicated);
    z->mine = zy_calloc((size_t)t->count + 1, sizeof *z->mine);
    z->split = zy_calloc((size_t)t->count + 1, sizeof *z->split);
    z->range = zy_calloc(2 * (size_t)t->count + 1, sizeof *z->range);
    const double fpb =
        m->ctx->device == ZY_DEV_CUDA ? OPTIM_NS_FLOPS_PER_BYTE_GPU : OPTIM_NS_FLOPS_PER_BYTE_CPU;
    double *cost = zy_calloc((size_t)t->count + 1, sizeof *cost);
    double total = 0, run = 0;
    for (int i = 0; i < t->count; i++) {
        z->replicated[i] = (unsigned char)zero1_replicates(oc, &t->items[i]);
        cost[i] = z->replicated[i] ? 0 : optim_update_cost(oc, &t->items[i], fpb);
        total += cost[i];
    }
    int r = 1;
    for (int i = 0; i < t->count && r < W; i++) {
        run += cost[i];
        while (r < W && run * W >= total * r) z->bound[r++] = i + 1;
    }
    free(cost);
    for (; r <= W; r++) z->bound[r] = t->count;
    for (int q = 0; q < W; q++)
        for (int i = z->bound[q]; i < z->bound[q + 1]; i++) z->owner[i] = q;
    for (int i = 0; i < t->count; i++) {
        z->mine[i] = z->replicated[i] || z->owner[i] == comm->rank;
        z->split[i] = (unsigned char)zero1_splits(oc, &t->items[i]);
        z->range[2 * i + 1] = t->items[i].numel;
        if (z->split[i])
            split_slice(z, &t->items[i], comm->rank, &z->range[2 * i], &z->range[2 * i + 1]);
    }
    /* the gradient norm's share of this rank: its own entries, and its slice of each split one
     * (whose nominal owner would otherwise count it whole) */
    int first, last;
    zero1_owned(z, &first, &last);
    z->norm_items = zy_calloc((size_t)t->count + 1, sizeof *z->norm_items);
    for (int i = 0; i < t->count; i++) {
        if (!z->split[i] && (i < first || i >= last)) continue;
        zy_param p = t->items[i];
        if (z->split[i]) {
            p.offset += z->range[2 * i];
            p.numel = z->range[2 * i + 1] - z->range[2 * i];
        }
        z->norm_items[z->norm_count++] = p;
    }
    const int L = m->cfg.num_hidden_layers;
    z->group = zy_calloc((size_t)t->count + 1, sizeof *z->group);
    z->foreign = zy_calloc((size_t)L + 2, sizeof *z->foreign);
    for (int i = 0; i < t->count; i++) {
        z->ready_at[i] = model_grads_final_at(m, i);
        z->group[i] = model_entry_group(m, i);
        if (!z->mine[i] || z->split[i]) z->foreign[z->group[i] + 1] = 1;
    }
}

void zero1_free(zy_zero1 *z) {
    free(z->bound);
    free(z->owner);
    free(z->ready_at);
    free(z->replicated);
    free(z->mine);
    free(z->split);
    free(z->range);
    free(z->norm_items);
    free(z->group);
    free(z->foreign);
    memset(z, 0, sizeof *z);
}

void zero1_owned(const zy_zero1 *z, int *first, int *last) {
    *first = z->bound[z->comm->rank];
    *last = z->bound[z->comm->rank + 1];
}

/* The floats of entries [a, b): from the first one's offset to the end of the last one (the
 * alignment padding between them included: one message instead of one per tensor). */
static size_t span_floats(const zy_param_table *t, int a, int b) {
    return t->items[b - 1].offset + t->items[b - 1].numel - t->items[a].offset;
}

/* m->grads_ready: reduces every run of consecutive entries that became final at `layer` and
 * share an owner to that owner, or all-reduces it when they are replicated; a split entry is
 * reduce-scattered over its slices. */
static void reduce_bucket(void *user, int layer) {
    zy_zero1 *z = user;
    const zy_param_table *t = &z->m->table;
    for (int a = 0; a < t->count && !z->failed;) {
        if (z->ready_at[a] != layer) {
            a++;
            continue;
        }
        if (z->split[a]) {
            if (split_reduce(z, &t->items[a]) != ZY_OK) z->failed = 1;
            a++;
            continue;
        }
        int b = a + 1;
        while (b < t->count && z->ready_at[b] == layer && z->owner[b] == z->owner[a] &&
               z->replicated[b] == z->replicated[a] && !z->split[b])
            b++;
        float *g = z->m->grads + t->items[a].offset;
        const size_t n = span_floats(t, a, b);
        const int rc = z->replicated[a]
                           ? comm_all_reduce(z->comm, g, n, ZY_COMM_F32, ZY_COMM_SUM)
                           : comm_reduce(z->comm, g, n, ZY_COMM_F32, ZY_COMM_SUM, z->owner[a]);
        if (rc != ZY_OK) z->failed = 1;
        a = b;
    }
}

void zero1_reduce_in_backward(zy_zero1 *z) {
    z->failed = comm_defer(z->comm, 1) != ZY_OK;
    z->m->grads_ready = reduce_bucket;
    z->m->grads_ready_user = z;
}

int zero1_grads_done(zy_zero1 *z) {
    z->m->grads_ready = NULL;
    z->m->grads_ready_user = NULL;
    /* the reduces read the gradients on the communicator's stream: wait before anything else
     * touches them */
    const int rc = comm_defer(z->comm, 0);
    if (z->share_failed) return zy_fail_ctx("receiving the updated weights from their owners");
    if (z->failed) return zy_fail_ctx("reducing the gradients to their owners");
    return rc;
}

int zero1_grad_sumsq(zy_zero1 *z, double *sumsq) {
    zy_param_table v = z->m->table; /* the entries (and slices) this rank counts */
    v.items = z->norm_items;
    v.count = z->norm_count;
    *sumsq = v.count ? clip_grad_sumsq(z->m->ctx, &v, z->m->grads) : 0.0;
    return comm_all_reduce(z->comm, sumsq, 1, ZY_COMM_F64, ZY_COMM_SUM);
}

/* Broadcasts from each owner the runs of its entries of one group (z->group) that pick()
 * selects, from the fp32 masters (compute 0) or the compute copy (compute 1: activation dtype);
 * not the replicated ones (every rank updated them). */
static int broadcast_group(zy_zero1 *z, int group, int (*pick)(const zy_param *), int compute) {
    zy_model *m = z->m;
    const zy_param_table *t = &m->table;
    const size_t esize = compute ? ops_act_size(m->ctx) : sizeof(float);
    const zy_comm_dtype dt = esize == 2 ? ZY_COMM_BF16 : ZY_COMM_F32;
    unsigned char *base = compute ? (unsigned char *)m->cparams : (unsigned char *)m->params;
    for (int a = 0; a < t->count;) {
        if (z->group[a] != group || !pick(&t->items[a]) || z->replicated[a]) {
            a++;
            continue;
        }
        int b = a + 1;
        while (b < t->count && z->group[b] == group && pick(&t->items[b]) && !z->replicated[b] &&
               z->owner[b] == z->owner[a])
            b++;
        const size_t off = t->items[a].offset, n = span_floats(t, a, b);
        ZY_TRY(comm_broadcast(z->comm, base + off * esize, n, dt, z->owner[a]));
        a = b;
    }
    return ZY_OK;
}

static int any_entry(const zy_param *p) {
    return 1;
}

static int is_matrix(const zy_param *p) {
    return p->kind == ZY_PARAM_MATRIX;
}

static int not_matrix(const zy_param *p) {
    return p->kind != ZY_PARAM_MATRIX;
}

/* The compute copy of fp32 weights [off, off + n) (floats into the whole buffer). */
static void recast_span(zy_model *m, size_t off, size_t n) {
    ops_cast_to_act(m->ctx, (char *)m->cparams + off * ops_act_size(m->ctx), m->params + off, n);
}

/* After group g's fp32 entries arrived: the receivers cast them into their compute copy (the
 * owner's optimizer wrote its own). */
static void recast_group(zy_zero1 *z, int group) {
    zy_model *m = z->m;
    const zy_param_table *t = &m->table;
    if (!m->cparams) return;
    for (int i = 0; i < t->count; i++) {
        const zy_param *p = &t->items[i];
        if (z->group[i] != group || p->kind == ZY_PARAM_MATRIX) continue;
        if (z->split[i]) { /* the other ranks' slices: before and after this rank's */
            recast_span(m, p->offset, z->range[2 * i]);
            recast_span(m, p->offset + z->range[2 * i + 1], p->numel - z->range[2 * i + 1]);
        } else if (!z->mine[i]) {
            recast_span(m, p->offset, p->numel);
        }
    }
}

/* Waits for the broadcasts of every group up to `group` (their marks), in order. A group whose
 * entries are all this rank's is not waited for: its weights are here, and the broadcast only
 * reads them (a later wait, or the end of the deferral, completes it). */
static int wait_groups(zy_zero1 *z, int group) {
    for (; z->next_group <= group; z->next_group++) {
        if (!z->foreign[z->next_group + 1]) continue;
        ZY_TRY(comm_wait_mark(z->comm, z->next_group + 1));
        recast_group(z, z->next_group);
    }
    return ZY_OK;
}

/* m->weights_needed during the forward after a share. The last call (layer L-1) waits for the
 * rest, the final norm's group L included. */
static void weights_needed(void *user, int group) {
    zy_zero1 *z = user;
    if (z->share_failed) return;
    if (wait_groups(z, group) != ZY_OK) {
        z->share_failed = 1;
        return;
    }
    if (group == z->m->cfg.num_hidden_layers - 1 && zero1_weights_ready(z) != ZY_OK)
        z->share_failed = 1;
}

int zero1_share_begin(zy_zero1 *z) {
    z->share_error = 0;
    return comm_defer(z->comm, 1);
}

/* The fp32 slices of group g's split entries, from every rank to every rank. */
static int gather_split_group(zy_zero1 *z, int group) {
    const zy_param_table *t = &z->m->table;
    for (int i = 0; i < t->count; i++)
        if (z->split[i] && z->group[i] == group)
            ZY_TRY(split_gather(z, z->m->params + t->items[i].offset, &t->items[i]));
    return ZY_OK;
}

int zero1_gather_split_state(zy_zero1 *z, zy_optim *opt) {
    zy_model *m = z->m;
    const zy_param_table *t = &m->table;
    for (int i = 0; i < t->count; i++) {
        if (!z->split[i]) continue;
        const zy_param *p = &t->items[i];
        const size_t lo = z->range[2 * i];
        /* assembled in the entry's gradient, which nothing needs between steps (the next backward
         * overwrites it whole) */
        float *whole = m->grads + p->offset;
        for (int k = 0; k < 2; k++) {                  /* exp_avg, exp_avg_sq */
            optim_adam_live_to(opt, i, k, whole + lo); /* fp32, whatever the moments' type */
            ZY_TRY(split_gather(z, whole, p));
            if (z->owner[i] == z->comm->rank) /* it alone saves them */
                ops_copy(m->ctx, optim_adam_host(opt, i, k), whole, p->numel * sizeof(float));
        }
    }
    return ZY_OK;
}

void zero1_share_group(void *user, int group) {
    zy_zero1 *z = user;
    if (z->share_error) return;
    int rc = gather_split_group(z, group);
    if (rc == ZY_OK && z->m->cparams) {
        rc = broadcast_group(z, group, is_matrix, 1);
        if (rc == ZY_OK) rc = broadcast_group(z, group, not_matrix, 0);
    } else if (rc == ZY_OK) { /* fp32 is what computes */
        rc = broadcast_group(z, group, any_entry, 0);
    }
    if (rc == ZY_OK) rc = comm_mark(z->comm, group + 1);
    z->share_error = rc != ZY_OK;
}

int zero1_share_end(zy_zero1 *z) {
    zy_model *m = z->m;
    if (z->share_error) {
        comm_defer(z->comm, 0); /* the error is the one to report */
        return zy_fail_ctx("sending the updated weights to every rank");
    }
    z->next_group = -1;
    z->share_pending = 1;
    m->weights_needed = weights_needed;
    m->weights_needed_user = z;
    return ZY_OK;
}

int zero1_weights_ready(zy_zero1 *z) {
    if (!z->share_pending) return ZY_OK;
    z->m->weights_needed = NULL;
    z->m->weights_needed_user = NULL;
    z->share_pending = 0;
    const int rc = wait_groups(z, z->m->cfg.num_hidden_layers);
    const int done = comm_defer(z->comm, 0);
    if (rc != ZY_OK || done != ZY_OK || z->share_failed) {
        z->share_failed = 0;
        return zy_fail_ctx("receiving the updated weights from their owners");
    }
    return ZY_OK;
}

int zero1_master_everywhere(const zy_zero1 *z, int i) {
    /* with a compute copy the GEMMs read only it: another rank's matrix needs no fp32 here */
    return !z->m->cparams || z->m->table.items[i].kind != ZY_PARAM_MATRIX;
}

int zero1_keeps_master(const zy_zero1 *z, int i) {
    return zero1_master_everywhere(z, i) || z->mine[i];
}

void zero1_release_masters(zy_zero1 *z) {
    const int n = z->m->table.count;
    unsigned char *keep = zy_calloc((size_t)n + 1, sizeof *keep);
    for (int i = 0; i < n; i++) keep[i] = (unsigned char)zero1_keeps_master(z, i);
    model_release_masters(z->m, keep);
    free(keep);
}
