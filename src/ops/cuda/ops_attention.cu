/* Causal GQA attention of ops.h on CUDA, and the choice of its kernels (cuda.attention,
 * zy_attention_backend): zayac's own (attention.cu) or cuDNN's fused ones (attention_cudnn.cu).
 * The choice is made per shape, the first time it is seen, for the forward and the backward
 * together, so a backward always reads the lse of its own backend's forward (the two lse agree in
 * definition, attention_cudnn.h, but zayac does not mix them). One line on stderr names each
 * shape's backend, once per context. */
#include "ops/cuda/attention.h"
#include "ops/cuda/attention_cudnn.h"
#include "ops/cuda/cuda_ops.h"
#include "ops/cuda/cuda_state.h"

#include <math.h>
#include <stdio.h>

int cuda_attention_ctx_init(zy_ctx *ctx, const zy_cuda_opts *opts) {
    cuda_state *s = cuda_st(ctx);
    const int backend = opts->attention;
    s->attention = backend;
    if (backend == ZY_ATTN_ZAYAC) return ZY_OK;
    s->attention_ws_auto = opts->attention_workspace_gib == ZY_ATTN_WORKSPACE_AUTO;
    const double gib =
        s->attention_ws_auto ? ZY_ATTN_WORKSPACE_GIB_BASE : opts->attention_workspace_gib;
    if (cudnn_attn_create(&s->cudnn, s->stream, (size_t)(gib * 1073741824.0)) == ZY_OK)
        return ZY_OK;
    if (backend == ZY_ATTN_CUDNN) return zy_fail("cuda.attention = cudnn: %s", zy_errmsg());
    fprintf(stderr, "zayac: attention: %s; zayac's kernels run it\n", zy_errmsg());
    zy_err_clear();
    return ZY_OK;
}

size_t cuda_ops_attention_workspace_bytes(zy_ctx *ctx, int B, int T, int Hq, int d) {
    cuda_state *s = cuda_st(ctx);
    const size_t ours = cuda_attention_bwd_scratch_bytes(B, T, Hq, d);
    const size_t cap = s->cudnn ? cudnn_attn_workspace_cap(s->cudnn) : 0;
    return ours > cap ? ours : cap;
}

size_t cuda_ops_attention_workspace_wanted(zy_ctx *ctx, int B, int T, int Hq, int Hk, int d) {
    cuda_state *s = cuda_st(ctx);
    if (!s->cudnn || !s->attention_ws_auto) return 0;
    const cudnn_attn_shape sh = {B, T, Hq, Hk, d, 0, 1.0f / sqrtf((float)d), 1};
    size_t bytes = 0;
    if (cudnn_attn_one_pass_bytes(s->cudnn, &sh, &bytes) != ZY_OK) {
        zy_err_clear(); /* a refused shape runs zayac's kernels: nothing to grow for */
        return 0;
    }
    return bytes;
}

/* cuda_ws allocates a quarter past the largest request: want fits when 1.25 want <= cap + spare. */
size_t cuda_ops_attention_workspace_grow(zy_ctx *ctx, size_t want, size_t spare) {
    cuda_state *s = cuda_st(ctx);
    if (!s->cudnn) return 0;
    const size_t cap = cudnn_attn_workspace_cap(s->cudnn);
    const double most = ZY_ATTN_WORKSPACE_GIB_MAX * 1073741824.0;
    if (s->attention_ws_auto && want > cap && (double)want <= most &&
        1.25 * (double)want <= (double)cap + (double)spare)
        cudnn_attn_set_cap(s->cudnn, want);
    return cudnn_attn_workspace_cap(s->cudnn);
}

void cuda_attention_ctx_free(cuda_state *s) {
    cudnn_attn_destroy(s->cudnn);
    s->cudnn = NULL;
}

/* 1 when cuDNN runs this shape on ctx (its plans built; workspace bytes of each direction in
 * *ws_fwd, *ws_bwd), 0 for zayac's kernels. The first sight of a shape prints the choice (with the
 * backward's chunks when it runs in chunks); under cuda.attention = cudnn a shape cuDNN refuses
 * ends the process with exit status 2 (the setting asks for what cannot run here).
 * cuDNN's deterministic backward keeps dP in its workspace, B Hq T^2 bf16 (8 x 2048: 0.5 GiB;
 * 4 x 4096: 1 GiB; 1 x 32768: 16 GiB). Past the workspace cap (cuda.attention_workspace_gib,
 * 2 GiB unless auto grew it: ops_attention_workspace_grow) it runs over chunks of query rows that
 * fit it (attention_cudnn.h); when cuDNN refuses those, cuda.attention = auto leaves the shape to
 * zayac's kernels, whose scratch stays linear in T there (attention.h), and cudnn runs the single
 * pass anyway. */
static int use_cudnn(zy_ctx *ctx, const cudnn_attn_shape *sh, size_t *ws_fwd, size_t *ws_bwd) {
    cuda_state *s = cuda_st(ctx);
    if (!s->cudnn) return 0;
    const int first = !cudnn_attn_seen(s->cudnn, sh);
    size_t fwd = 0, bwd = 0;
    int ok = cudnn_attn_prepare(s->cudnn, sh, &fwd, &bwd) == ZY_OK;
    if (!ok && s->attention == ZY_ATTN_CUDNN)
        zy_fatal_input_at(__FILE__, __LINE__, "cuda.attention = cudnn",
                          "B=%d T=%d Hq=%d Hk=%d d=%d window=%d: %s (cuda.attention = auto runs "
                          "zayac's kernels where cuDNN cannot)",
                          sh->B, sh->T, sh->Hq, sh->Hk, sh->d, sh->window, zy_errmsg());
    const size_t cap = cudnn_attn_workspace_cap(s->cudnn);
    const int too_big = ok && s->attention == ZY_ATTN_AUTO && bwd > cap;
    if (first) {
        char why[96] = "";
        if (too_big)
            snprintf(why, sizeof why,
                     "cuDNN's backward workspace is past %.3g GiB: ", cap / 1073741824.0);
        fprintf(stderr, "zayac: attention B=%d T=%d Hq=%d Hk=%d d=%d window=%d: %s%s%s\n", sh->B,
                sh->T, sh->Hq, sh->Hk, sh->d, sh->window, ok && !too_big ? "" : "zayac's kernels; ",
                why, cudnn_attn_describe(s->cudnn, sh));
    }
    if (!ok) zy_err_clear();
    if (!ok || too_big) return 0;
    if (ws_fwd) *ws_fwd = fwd;
    if (ws_bwd) *ws_bwd = bwd;
    return 1;
}

static cudnn_attn_shape attn_shape(int B, int T, int Hq, int Hk, int d, float scale, int window) {
    cudnn_attn_shape sh = {B, T, Hq, Hk, d, window, scale, 1}; /* training: deterministic */
    return sh;
}

void cuda_ops_attention_fwd(zy_ctx *ctx, zy_act *out, float *lse, const zy_act *q, const zy_act *k,
                            const zy_act *v, int B, int T, int Hq, int Hk, int d, float scale,
                            int window) {
    const cudnn_attn_shape sh = attn_shape(B, T, Hq, Hk, d, scale, window);
    size_t ws_bytes = 0;
    if (B > 0 && use_cudnn(ctx, &sh, &ws_bytes, NULL)) {
        void *ws = ws_bytes ? cuda_ws(ctx, ws_bytes) : NULL;
        ZY_STATUS_CHECK(cudnn_attn_fwd(cuda_st(ctx)->cudnn, &sh, q, k, v, out, lse, ws, ws_bytes));
        return;
    }
    ZY_STATUS_CHECK(
        cuda_attention_fwd(q, k, v, out, lse, B, T, Hq, Hk, d, scale, window, cuda_stream(ctx)));
}

/* Scratch (zayac's row sums and dS tiles, or cuDNN's row sums and workspace) from the context's
 * workspace. */
void cuda_ops_attention_bwd(zy_ctx *ctx, zy_act *dq, zy_act *dk, zy_act *dv, const zy_act *dout,
                            const zy_act *out, const float *lse, const zy_act *q, const zy_act *k,
                            const zy_act *v, int B, int T, int Hq, int Hk, int d, float scale,
                            int window) {
    const cudnn_attn_shape sh = attn_shape(B, T, Hq, Hk, d, scale, window);
    size_t sb = 0;
    if (B > 0 && use_cudnn(ctx, &sh, NULL, &sb)) {
        void *ws = sb ? cuda_ws(ctx, sb) : NULL;
        ZY_STATUS_CHECK(
            cudnn_attn_bwd(cuda_st(ctx)->cudnn, &sh, dout, q, k, v, out, lse, dq, dk, dv, ws, sb));
        return;
    }
    sb = cuda_attention_bwd_scratch_bytes(B, T, Hq, d);
    void *scratch = sb ? cuda_ws(ctx, sb) : NULL;
    ZY_STATUS_CHECK(cuda_attention_bwd(dout, q, k, v, out, lse, dq, dk, dv, scratch, sb, B, T, Hq,
                                       Hk, d, scale, window, cuda_stream(ctx)));
}
