/* Expert GEMM variants for tuning (see gemm_grouped.h): plain C on gemm.h's entry points. */
#include "gemm_grouped.h"
#include "base/err.h"

#include <string.h>

int dev_gemm_uniform_cap(const int *offsets, int E) {
    if (E <= 0 || offsets[0] != 0) return -1;
    int cap = offsets[1];
    for (int e = 1; e <= E; e++)
        if (offsets[e] != e * cap) return -1;
    return cap;
}

/* The padded layout: every expert's GEMM in one strided batch (expert e's operands lie e strides
 * after expert 0's). */
static int grouped_padded(cuda_gemm_ctx *c, cuda_gemm_expert_kind kind, void *out, const void *in,
                          const void *w, const int *offsets, int E, int N, int K, float beta,
                          cuda_gemm_dtype dab, cuda_gemm_dtype dc, void *stream) {
    const int cap = dev_gemm_uniform_cap(offsets, E);
    if (cap < 0)
        return zy_fail("dev_gemm_grouped: the padded implementation needs offsets e * cap, found "
                       "offsets[1] = %d, offsets[%d] = %d",
                       E > 0 ? offsets[1] : 0, E, offsets[E]);
    const long long wmat = (long long)N * K;
    cuda_gemm_desc g;
    memset(&g, 0, sizeof g);
    g.alpha = 1.0f, g.beta = beta, g.dtype_ab = dab, g.dtype_c = dc, g.batch = E;
    if (E == 0 || cap == 0) { /* no rows: dW = beta dW (K = 0 products), nothing else */
        if (kind != CUDA_GEMM_EXPERT_BWD_WEIGHT || beta == 1.0f || E == 0) return ZY_OK;
        g.M = N, g.N = K, g.K = 0, g.transA = 1, g.stride_c = wmat;
        return cuda_gemm_run(c, &g, out, out, in, w, stream);
    }
    const cuda_gemm_expert e0 =
        cuda_gemm_expert_problem(kind, 0, 0, cap, out, in, w, N, K, dab, dc);
    g.M = e0.M, g.N = e0.N, g.K = e0.K, g.transA = e0.transA, g.transB = e0.transB;
    if (kind == CUDA_GEMM_EXPERT_FWD) /* X rows, W, Y rows */
        g.stride_a = (long long)cap * K, g.stride_b = wmat, g.stride_c = (long long)cap * N;
    else if (kind == CUDA_GEMM_EXPERT_BWD_DATA) /* dY rows, W, dX rows */
        g.stride_a = (long long)cap * N, g.stride_b = wmat, g.stride_c = (long long)cap * K;
    else /* dY rows, X rows, dW */
        g.stride_a = (long long)cap * N, g.stride_b = (long long)cap * K, g.stride_c = wmat;
    return cuda_gemm_run(c, &g, e0.C, e0.C, e0.A, e0.B, stream);
}

int dev_gemm_grouped(cuda_gemm_ctx *c, cuda_gemm_expert_kind kind, void *out, const void *in,
                     const void *w, const int *offsets, int E, int N, int K, float beta,
                     cuda_gemm_dtype dab, cuda_gemm_dtype dc, dev_grouped_impl impl, void *stream) {
    if (kind != CUDA_GEMM_EXPERT_FWD && kind != CUDA_GEMM_EXPERT_BWD_DATA &&
        kind != CUDA_GEMM_EXPERT_BWD_WEIGHT)
        return zy_fail("dev_gemm_grouped: unknown GEMM kind %d", (int)kind);
    if (E < 0 || E > CUDA_GEMM_MAX_EXPERTS || N < 0 || K < 0)
        return zy_fail("dev_gemm_grouped: E=%d N=%d K=%d outside 0..%d experts / negative sizes", E,
                       N, K, CUDA_GEMM_MAX_EXPERTS);
    if (offsets[0] != 0)
        return zy_fail("dev_gemm_grouped: offsets[0] = %d, expected 0", offsets[0]);
    for (int e = 0; e < E; e++)
        if (offsets[e + 1] < offsets[e])
            return zy_fail("dev_gemm_grouped: offsets decrease at expert %d (%d -> %d)", e,
                           offsets[e], offsets[e + 1]);
    if (dab == CUDA_GEMM_FP32 && dc != CUDA_GEMM_FP32)
        return zy_fail("dev_gemm_grouped: fp32 inputs need an fp32 output, found bf16");
    if (kind != CUDA_GEMM_EXPERT_BWD_WEIGHT)
        beta = 0.0f; /* the data GEMMs overwrite */
    else if (beta != 0.0f && beta != 1.0f)
        return zy_fail("dev_gemm_grouped: the weight gradient's beta must be 0 or 1, found %g",
                       (double)beta);
    if (impl == DEV_GROUPED_PADDED)
        return grouped_padded(c, kind, out, in, w, offsets, E, N, K, beta, dab, dc, stream);
    if (impl != DEV_GROUPED_LOOP && impl != DEV_GROUPED_CHUNKED)
        return zy_fail("dev_gemm_grouped: unknown implementation %d", (int)impl);
    /* chunks share one weight-gradient matrix per expert: that GEMM is per expert anyway */
    const int block = impl == DEV_GROUPED_CHUNKED && kind != CUDA_GEMM_EXPERT_BWD_WEIGHT
                          ? CUDA_GEMM_CHUNK_ROWS
                          : 0;
    if (block) /* the full blocks in one call, then per expert only the rows after them */
        ZY_TRY(cuda_gemm_grouped_chunks(c, out, in, w, offsets, E, N, K, block,
                                        kind == CUDA_GEMM_EXPERT_BWD_DATA, dab, dc, stream));
    for (int e = 0; e < E; e++) {
        int rows = offsets[e + 1] - offsets[e];
        const int done = block ? rows / block * block : 0;
        rows -= done;
        if (rows == 0 && (kind != CUDA_GEMM_EXPERT_BWD_WEIGHT || beta == 1.0f))
            continue; /* nothing to write (dW_e += nothing) */
        const cuda_gemm_expert g =
            cuda_gemm_expert_problem(kind, e, offsets[e] + done, rows, out, in, w, N, K, dab, dc);
        ZY_TRY(cuda_gemm(c, g.C, g.A, g.B, g.M, g.N, g.K, g.transA, g.transB, 1.0f, beta, dab, dc,
                         stream));
    }
    return ZY_OK;
}
