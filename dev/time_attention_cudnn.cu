/* dev/time_attention_cudnn: times zayac's attention kernels (ops/cuda/attention.h) against cuDNN's
 * (ops/cuda/attention_cudnn.h: the deterministic backward training uses, and the default one with
 * an fp32 dq accumulator that torch SDPA runs) on the ZAYA1 shapes (Hq 8, Hk 2, d 128, causal;
 * B x T = 8 x 2048, 4 x 4096, 1 x 32768): the median of many runs with CUDA events, TFLOP/s with
 * the causal forward's 2 B T^2 Hq d FLOPs and the backward counted as 2.5 times that. Where the
 * deterministic backward runs in chunks of query rows (its single pass past the 2 GiB workspace
 * cap: 1 x 32768), one more backward column: the single pass anyway (workspace past the cap); the
 * chunk size and workspace are printed with the plans. Prints one JSON line per
 * measurement as it goes, then a markdown table. Inputs are random non-zero bf16. Needs a GPU;
 * exit status 1 when a call fails, 2 when cuDNN is unavailable. */
#include "ops/cuda/attention.h"
#include "ops/cuda/attention_cudnn.h"
#include "base/bf16.h"
#include "base/check.h"
extern "C" {
#include "base/rng.h" /* a C header without C++ guards */
}

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* n bf16 values uniform in +-[0.25, 0.5) (never zero) on the device, drawn on the host. */
static void fill_bf16(void *dev, size_t n, uint64_t seed) {
    zy_rng r = zy_rng_init(seed, 1);
    uint16_t *h = (uint16_t *)malloc(n * sizeof *h);
    ZY_CHECK(h != NULL);
    for (size_t i = 0; i < n; i++) {
        float u = zy_rng_uniform(&r), sign = zy_rng_u64(&r) & 1 ? -1.0f : 1.0f;
        h[i] = zy_f32_to_bf16((0.25f + 0.25f * u) * sign);
    }
    ZY_CUDA_CHECK(cudaMemcpy(dev, h, n * sizeof *h, cudaMemcpyHostToDevice));
    free(h);
}

enum { IMPL_ZAYAC, IMPL_CUDNN_DET, IMPL_CUDNN_ONEPASS, IMPL_CUDNN_NONDET, NIMPL };
static const char *const impl_name[NIMPL] = {
    "zayac", "cudnn (deterministic)", "cudnn (deterministic, one pass)", "cudnn (dq atomics)"};
static const char *const impl_key[NIMPL] = {"zayac", "cudnn_det", "cudnn_det_onepass",
                                            "cudnn_nondet"};

/* The limits each cuDNN variant's plans are built and run under (the handle's, set before every
 * call): the defaults, or no cap (one pass). */
static void set_limits(cudnn_attn *c, int impl) {
    cudnn_attn_limits l = {0, 0};
    if (impl == IMPL_CUDNN_ONEPASS) l.workspace_cap = (size_t)1 << 40;
    cudnn_attn_set_limits(c, &l);
}

typedef struct {
    int B, T, reps;
} time_shape;

typedef struct {
    void *q, *k, *v, *dout, *out, *dq, *dk, *dv, *ws;
    float *lse;
    size_t ws_bytes;
} bufs;

static int cmp_float(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

/* One pass (bwd: 1) of impl on sh. */
static int run_pass(cudnn_attn *c, int impl, int bwd, const cudnn_attn_shape *sh, bufs *b) {
    if (impl == IMPL_ZAYAC) {
        if (!bwd)
            return cuda_attention_fwd(b->q, b->k, b->v, b->out, b->lse, sh->B, sh->T, sh->Hq,
                                      sh->Hk, sh->d, sh->scale, sh->window, 0);
        size_t sb = cuda_attention_bwd_scratch_bytes(sh->B, sh->T, sh->Hq, sh->d);
        return cuda_attention_bwd(b->dout, b->q, b->k, b->v, b->out, b->lse, b->dq, b->dk, b->dv,
                                  b->ws, sb, sh->B, sh->T, sh->Hq, sh->Hk, sh->d, sh->scale,
                                  sh->window, 0);
    }
    set_limits(c, impl);
    if (!bwd) return cudnn_attn_fwd(c, sh, b->q, b->k, b->v, b->out, b->lse, b->ws, b->ws_bytes);
    return cudnn_attn_bwd(c, sh, b->dout, b->q, b->k, b->v, b->out, b->lse, b->dq, b->dk, b->dv,
                          b->ws, b->ws_bytes);
}

/* Median ms of reps runs after 3 warm-up runs; -1 when a run fails (message printed). */
static float time_pass(cudnn_attn *c, int impl, int bwd, const cudnn_attn_shape *sh, bufs *b,
                       int reps) {
    /* the forward of the same implementation first: the backward reads its out and lse */
    if (bwd && run_pass(c, impl, 0, sh, b) != ZY_OK) goto fail;
    for (int i = 0; i < 3; i++)
        if (run_pass(c, impl, bwd, sh, b) != ZY_OK) goto fail;
    {
        float *ms = (float *)malloc(reps * sizeof(float));
        cudaEvent_t e0, e1;
        ZY_CUDA_CHECK(cudaEventCreate(&e0));
        ZY_CUDA_CHECK(cudaEventCreate(&e1));
        for (int i = 0; i < reps; i++) {
            ZY_CUDA_CHECK(cudaEventRecord(e0, 0));
            if (run_pass(c, impl, bwd, sh, b) != ZY_OK) goto fail;
            ZY_CUDA_CHECK(cudaEventRecord(e1, 0));
            ZY_CUDA_CHECK(cudaEventSynchronize(e1));
            ZY_CUDA_CHECK(cudaEventElapsedTime(&ms[i], e0, e1));
        }
        cudaEventDestroy(e0);
        cudaEventDestroy(e1);
        qsort(ms, reps, sizeof(float), cmp_float);
        float med = ms[reps / 2];
        free(ms);
        return med;
    }
fail:
    printf("  %s %s B=%d T=%d: %s\n", impl_name[impl], bwd ? "bwd" : "fwd", sh->B, sh->T,
           zy_errmsg());
    return -1;
}

int main(void) {
    const int Hq = 8, Hk = 2, d = 128;
    const time_shape shapes[] = {{8, 2048, 50}, {4, 4096, 30}, {1, 32768, 10}};
    enum { NS = sizeof shapes / sizeof shapes[0] };
    cudnn_attn *c = NULL;
    if (cudnn_attn_create(&c, 0, 0) != ZY_OK) {
        printf("%s\n", zy_errmsg());
        return 2;
    }
    printf("cuDNN %ld\n", cudnn_attn_version());
    float ms[NS][NIMPL][2];
    int chunk[NS];
    for (int s = 0; s < NS; s++) {
        const int B = shapes[s].B, T = shapes[s].T;
        const size_t nq = (size_t)B * T * Hq * d, nk = (size_t)B * T * Hk * d;
        cudnn_attn_shape sh[NIMPL];
        size_t ws = cuda_attention_bwd_scratch_bytes(B, T, Hq, d);
        chunk[s] = 0;
        for (int i = 0; i < NIMPL; i++) {
            cudnn_attn_shape x = {B, T, Hq, Hk, d, 0, 0.08838834764831845f, i != IMPL_CUDNN_NONDET};
            sh[i] = x;
            if (i == IMPL_ZAYAC) continue;
            /* the one-pass variant only where the deterministic one is chunked */
            if (i == IMPL_CUDNN_ONEPASS && !chunk[s]) continue;
            set_limits(c, i);
            size_t f = 0, g = 0;
            cudaEvent_t t0, t1; /* plan building time, for the record */
            ZY_CUDA_CHECK(cudaEventCreate(&t0));
            ZY_CUDA_CHECK(cudaEventCreate(&t1));
            ZY_CUDA_CHECK(cudaEventRecord(t0, 0));
            int rc = cudnn_attn_prepare(c, &sh[i], &f, &g);
            ZY_CUDA_CHECK(cudaEventRecord(t1, 0));
            ZY_CUDA_CHECK(cudaEventSynchronize(t1));
            float build_ms = 0;
            cudaEventElapsedTime(&build_ms, t0, t1);
            printf("B=%d T=%d %s: %s (plans built in %.0f ms)\n", B, T, impl_name[i],
                   rc == ZY_OK ? cudnn_attn_describe(c, &sh[i]) : zy_errmsg(), build_ms);
            cudnn_attn_plan_info info;
            if (rc == ZY_OK && cudnn_attn_plan_get(c, &sh[i], &info) == ZY_OK) {
                printf("  backward: %s", info.chunk ? "" : "one pass");
                if (info.chunk) printf("%d chunks of %d query rows", info.nchunks, info.chunk);
                printf(", workspace %.1f MiB (cuDNN's %.1f MiB)\n", info.bwd_ws / 1048576.0,
                       (info.chunk ? info.chunk_ws : info.bwd_ws) / 1048576.0);
                if (i == IMPL_CUDNN_DET) chunk[s] = info.chunk;
            }
            fflush(stdout);
            if (f > ws) ws = f;
            if (g > ws) ws = g;
        }
        bufs b;
        void **all[] = {&b.q, &b.k, &b.v, &b.dout, &b.out, &b.dq, &b.dk, &b.dv};
        const size_t n[] = {nq, nk, nk, nq, nq, nq, nk, nk};
        for (int i = 0; i < 8; i++) {
            ZY_CUDA_CHECK(cudaMalloc(all[i], n[i] * 2));
            fill_bf16(*all[i], n[i], 1234 + i);
        }
        ZY_CUDA_CHECK(cudaMalloc((void **)&b.lse, (size_t)B * Hq * T * sizeof(float)));
        ZY_CUDA_CHECK(cudaMalloc(&b.ws, ws ? ws : 1));
        b.ws_bytes = ws;
        const double fl = 2.0 * B * (double)T * T * Hq * d;
        for (int i = 0; i < NIMPL; i++)
            for (int bwd = 0; bwd < 2; bwd++) {
                /* the one pass differs from the deterministic one only in a chunked backward */
                if (i == IMPL_CUDNN_ONEPASS && (!bwd || !chunk[s])) {
                    ms[s][i][bwd] = 0;
                    continue;
                }
                float t = time_pass(c, i, bwd, &sh[i], &b, shapes[s].reps);
                ms[s][i][bwd] = t;
                double tf = t > 0 ? (bwd ? 2.5 : 1.0) * fl / (t * 1e9) : 0;
                printf("{\"bench\": \"attention\", \"impl\": \"%s\", \"pass\": \"%s\", \"B\": %d, "
                       "\"T\": %d, \"Hq\": %d, \"Hk\": %d, \"d\": %d, \"ms\": %.4f, "
                       "\"tflops\": %.1f}\n",
                       impl_key[i], bwd ? "bwd" : "fwd", B, T, Hq, Hk, d, t, tf);
                fflush(stdout);
            }
        for (int i = 0; i < 8; i++) ZY_CUDA_CHECK(cudaFree(*all[i]));
        ZY_CUDA_CHECK(cudaFree(b.lse));
        ZY_CUDA_CHECK(cudaFree(b.ws));
    }
    printf("\n| B x T | pass | zayac ms (TFLOP/s) | cuDNN det. ms (TFLOP/s) | cuDNN det. one pass "
           "| cuDNN atomics ms (TFLOP/s) | zayac / cuDNN det. |\n|---|---|---|---|---|---|---|\n");
    for (int s = 0; s < NS; s++)
        for (int bwd = 0; bwd < 2; bwd++) {
            const double fl =
                (bwd ? 2.5 : 1.0) * 2.0 * shapes[s].B * (double)shapes[s].T * shapes[s].T * Hq * d;
            printf("| %d x %d | %s%s |", shapes[s].B, shapes[s].T, bwd ? "bwd" : "fwd",
                   bwd && chunk[s] ? " (chunked)" : "");
            for (int i = 0; i < NIMPL; i++) {
                float t = ms[s][i][bwd];
                if (t > 0)
                    printf(" %.3f (%.0f) |", t, fl / (t * 1e9));
                else if (t == 0)
                    printf(" - |");
                else
                    printf(" failed |");
            }
            float z = ms[s][IMPL_ZAYAC][bwd], cd = ms[s][IMPL_CUDNN_DET][bwd];
            if (z > 0 && cd > 0)
                printf(" %.2f |\n", z / cd);
            else
                printf(" |\n");
        }
    cudnn_attn_destroy(c);
    return 0;
}
