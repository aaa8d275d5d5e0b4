/* Global-norm gradient clipping (see clip.h); a CUDA context runs the GPU kernels of
 * optim_cuda.h. */
#include "optim/clip.h"
#include "base/err.h"
#ifdef ZY_HAVE_CUDA
#include "optim/optim_cuda.h"
#endif

#include <math.h>

/* 1 when ctx is a CUDA context (which a build without CUDA cannot have made). */
static int on_cuda(const zy_ctx *ctx) {
    if (ctx->device != ZY_DEV_CUDA) return 0;
#ifndef ZY_HAVE_CUDA
    ZY_CHECKF(0, "clip: a CUDA context in a build without CUDA");
#endif
    return 1;
}

/* Sum of squares of n floats, deterministic whatever the thread count: fixed-size chunks are
 * summed in parallel, then their partial sums are added in order. */
static double sumsq(const float *g, size_t n) {
    enum { CHUNK = 16384, GROUP = 64 };
    double total = 0, part[GROUP];
    for (size_t base = 0; base < n; base += (size_t)CHUNK * GROUP) {
        size_t left = n - base;
        int chunks = (int)((left + CHUNK - 1) / CHUNK);
        if (chunks > GROUP) chunks = GROUP;
#pragma omp parallel for if (chunks > 1) schedule(static)
        for (int c = 0; c < chunks; c++) {
            size_t lo = base + (size_t)c * CHUNK, hi = lo + CHUNK < n ? lo + CHUNK : n;
            double s = 0;
            for (size_t j = lo; j < hi; j++) s += (double)g[j] * g[j];
            part[c] = s;
        }
        for (int c = 0; c < chunks; c++) total += part[c];
    }
    return total;
}

double clip_grad_sumsq(zy_ctx *ctx, const zy_param_table *t, const float *grads) {
    if (on_cuda(ctx)) {
#ifdef ZY_HAVE_CUDA
        return optim_cuda_sumsq(ctx, t, grads);
#endif
    }
    double total = 0;
    for (int i = 0; i < t->count; i++) {
        const zy_param *p = &t->items[i];
        if (p->kind != ZY_PARAM_BUFFER) total += sumsq(grads + p->offset, p->numel);
    }
    return total;
}

float clip_factor(double norm, float max_norm) {
    if (!(max_norm > 0) || !isfinite(norm)) return 1.0f;
    double f = (double)max_norm / (norm + 1e-6);
    return f < 1.0 ? (float)f : 1.0f;
}
