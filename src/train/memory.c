/* Memory estimate and check of a job (see memory.h). */
#include "train/memory.h"
#include "base/err.h"
#include "base/sysmem.h"
#include "model/model.h"
#include "tensor/params.h"
#include "train/zero1.h"

#include <limits.h>
#include <math.h>
#include <stdio.h>

#define GB 1e9

void mem_need(zy_ctx *ctx, const zy_config *mc, int B, int T, int recompute,
              const zy_optim_config *oc, int world, zy_mem_need *need) {
    zy_param_table t;
    model_build_table(&t, mc);
    const double floats = t.overflow ? INFINITY : (double)t.total, f32 = sizeof(float);
    const int on_gpu = ctx->device != ZY_DEV_CPU;
    need->weights = floats * f32;
    if (ops_act_size(ctx) != sizeof(float)) need->weights += floats * (double)ops_act_size(ctx);
    need->grads = oc ? floats * f32 : 0;
    double shared = 0, everywhere = 0; /* state floats: split over the ranks, on every rank */
    double mirror = 0;       /* floats of the host mirror (fp32 whatever the device keeps) */
    double mirror_extra = 0; /* floats the host mirror holds whole of split entries' slices */
    double matrices = 0;     /* floats of the matrices */
    for (int i = 0; oc && i < t.count; i++) { /* the optimizer keeps 16-float aligned blocks */
        if (t.items[i].kind == ZY_PARAM_MATRIX) matrices += (double)t.items[i].numel;
        const double f = (double)optim_state_bytes(oc, &t.items[i], on_gpu) / f32;
        const double h = (double)optim_state_bytes(oc, &t.items[i], 0) / f32;
        if (world > 1 && zero1_replicates(oc, &t.items[i]) && !zero1_splits(oc, &t.items[i])) {
            everywhere += f;
            mirror += h;
        } else {
            shared += f;
            mirror += h / (world > 1 ? world : 1);
        }
        if (world > 1 && zero1_splits(oc, &t.items[i])) mirror_extra += h * (1.0 - 1.0 / world);
    }
    need->optim = (shared / (world > 1 ? world : 1) + everywhere) * f32;
    /* bf16 moments or momentum on a GPU: the staging buffer between them and the mirror */
    if (oc && on_gpu &&
        (oc->adam_moments == ZY_ADAM_MOMENTS_BF16 ||
         (oc->use_muon && oc->muon_momentum_dtype == ZY_ADAM_MOMENTS_BF16)))
        need->optim += (double)OPTIM_STAGE_FLOATS * f32;
    params_free(&t);
    size_t arena = B > 0 ? acts_bytes(mc, ctx, B, T, recompute) : 0;
    need->acts = arena == SIZE_MAX ? INFINITY : (double)arena;
    need->workspace = oc && B > 0 ? (double)ops_attention_workspace_bytes(
                                        ctx, B, T, mc->num_attention_heads, mc->head_dim)
                                  : 0;
    /* ZeRO-1 with a compute copy: from the end of set-up a rank keeps the fp32 masters of about
     * 1/world of the matrices (train/zero1.h; ownership is balanced by update cost, so the
     * largest rank may hold a little more); before, all of them, but no optimizer state */
    const double setup = need->setup = need->weights + need->grads + need->acts;
    if (world > 1 && ops_act_size(ctx) != sizeof(float))
        need->weights -= matrices * f32 * (1.0 - 1.0 / world);
    need->device = need->weights + need->grads + need->optim + need->acts + need->workspace;
    if (setup > need->device) need->device = setup;
    /* a GPU job: the weights whole in host memory (initialisation and loads go through it; a
     * checkpoint's pinned copy holds what the rank keeps, less) and the state's mirror */
    need->host = on_gpu ? floats * f32 + (mirror + mirror_extra) * f32 : 0;
}

size_t mem_workspace_wanted(zy_ctx *ctx, const zy_config *mc, int B, int T) {
    return ops_attention_workspace_wanted(ctx, B, T, mc->num_attention_heads,
                                          mc->num_key_value_heads, mc->head_dim);
}

size_t mem_grow_workspace(zy_ctx *ctx, zy_mem_need *need, size_t want) {
    const double avail = (double)ops_mem_available(ctx);
    const double reserve = fmax(MEM_RESERVE_BYTES, MEM_RESERVE_FRACTION * avail);
    const double spare = avail - need->device - reserve;
    const size_t cap = ops_attention_workspace_grow(ctx, want, spare > 0 ? (size_t)spare : 0);
    if ((double)cap > need->workspace) {
        need->device += (double)cap - need->workspace;
        need->workspace = (double)cap;
    }
    return cap;
}

static int refuse(const char *what, const char *where, double need, double ranks, double avail,
                  const zy_mem_need *n) {
    char per[64] = "";
    if (ranks > 1) snprintf(per, sizeof per, " for %.0f ranks of this host", ranks);
    char ws[160] = "";
    int k = 0;
    if (n->workspace > 0)
        k = snprintf(ws, sizeof ws, ", attention workspace %.1f GB", n->workspace / GB);
    if (n->device == n->setup && n->setup > n->weights + n->grads + n->optim + n->acts)
        snprintf(ws + k, sizeof ws - (size_t)k,
                 "; the peak is at set-up, while every fp32 master is still here");
    return zy_fail("%s needs %.1f GB of %s memory%s (per rank: weights %.1f GB, gradients %.1f GB, "
                   "optimizer %.1f GB, activations %.1f GB%s), %.1f GB available: use a smaller "
                   "model, batch or sequence length",
                   what, need / GB, where, per, n->weights / GB, n->grads / GB, n->optim / GB,
                   n->acts / GB, ws, avail / GB);
}

int mem_check(zy_ctx *ctx, const zy_config *mc, int B, int T, int recompute,
              const zy_optim_config *oc, int world, int host_ranks, const char *what,
              zy_mem_need *need) {
    if ((long long)B * T > INT_MAX)
        return zy_fail("%s: %d x %d = %lld tokens in one micro-batch, at most %d: lower batch_size "
                       "or seq_len (grad_accum keeps the tokens per step)",
                       what, B, T, (long long)B * T, INT_MAX);
    zy_mem_need n;
    mem_need(ctx, mc, B, T, recompute, oc, world, &n);
    if (need) *need = n;
    const int on_gpu = ctx->device != ZY_DEV_CPU;
    const double ranks = host_ranks > 1 ? host_ranks : 1;
    const double avail = (double)ops_mem_available(ctx);
    if (on_gpu && avail > 0 && !(n.device <= avail))
        return refuse(what, "GPU", n.device, 1, avail, &n);
    if (!on_gpu && avail > 0 && !(n.device * ranks <= avail))
        return refuse(what, "host", n.device * ranks, ranks, avail, &n);
    size_t host = 0;
    if (on_gpu && zy_host_mem_available(&host) == 0 && !(n.host * ranks <= (double)host))
        return refuse(what, "host", n.host * ranks, ranks, (double)host, &n);
    return ZY_OK;
}
