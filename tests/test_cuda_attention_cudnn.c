/* Tests of cuDNN's attention (ops/cuda/attention_cudnn.h) against zayac's CUDA kernels
 * (ops/cuda/attention.h, themselves tested against the CPU op): out, lse, dq, dk, dv on small and
 * ZAYA1 shapes (Hq 8, Hk 2, d 128; T off the multiples of 128, windows, B > 1, Hq = Hk), the
 * backward run in chunks of query rows (forced by a chunk limit or a small workspace cap), the
 * backward run twice with bitwise-identical results (single pass and chunked), and the shapes cuDNN
 * must refuse. The op table (tests/op_cases_attention.c, backend "cuda+cudnn") runs the same
 * through ops.h against the CPU op. Skipped without a GPU or without cuDNN (libcudnn.so.9), with
 * the reason.
 *
 * Tolerances: each backend rounds the products' operands and its outputs to bf16 and is within
 * about 3e-3 RMS-relative of the fp32 CPU reference (op_cases_attention.c bounds it by 1e-2), so
 * the two backends' out, dq, dk, dv differ by a relative L2 error under 1e-2 too. lse is fp32 from
 * the same bf16 inputs with fp32 accumulation on both sides: within 1e-3 absolute (values near
 * log T). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/rng.h"
#include "model/config.h"
#include "ops/ops.h"
#include "optim/optim.h"
#include "train/memory.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef ZY_HAVE_CUDA
#include "ops/cuda/attention.h"
#include "ops/cuda/attention_cudnn.h"

#include <cuda_runtime_api.h>

static zy_rng rng;

#include "attention_test_util.h"

static cudnn_attn *cudnn;

/* 1 when the GPU and cuDNN are there; otherwise prints why the test is skipped. */
static int have_cudnn(void) {
    static int tried, ok;
    if (!tried) {
        tried = 1;
        if (!have_gpu()) {
            printf("    no GPU: skipped\n");
        } else if (cudnn_attn_create(&cudnn, 0, 0) != ZY_OK) {
            printf("    %s: skipped\n", zy_errmsg());
        } else {
            ok = 1;
            printf("    cuDNN %ld\n", cudnn_attn_version());
        }
        fflush(stdout);
    }
    return ok;
}

/* The device buffers of one problem: inputs, and each backend's outputs. */
typedef struct {
    void *q, *k, *v, *dout;
    void *out[2], *dq[2], *dk[2], *dv[2]; /* [0] zayac, [1] cuDNN */
    float *lse[2];
    void *ws;
    size_t ws_bytes;
    size_t nq, nk, nl;
} att_bufs;

static void *dev_alloc(size_t bytes) {
    void *p = NULL;
    CK(cudaMalloc(&p, bytes ? bytes : 1));
    CK(cudaMemset(p, 0xff, bytes ? bytes : 1)); /* NaN in bf16 and fp32: unwritten shows */
    return p;
}

/* Random bf16 q, k, v, dout (normal, sd 1) on the GPU; outputs poisoned. */
static void bufs_init(att_bufs *b, const cudnn_attn_shape *sh, size_t ws_bytes) {
    memset(b, 0, sizeof *b);
    b->nq = (size_t)sh->B * sh->T * sh->Hq * sh->d;
    b->nk = (size_t)sh->B * sh->T * sh->Hk * sh->d;
    b->nl = (size_t)sh->B * sh->Hq * sh->T;
    void **in[4] = {&b->q, &b->k, &b->v, &b->dout};
    const size_t n_in[4] = {b->nq, b->nk, b->nk, b->nq};
    for (int i = 0; i < 4; i++) {
        uint16_t *bits;
        free(rand_bf16(n_in[i], 1.0f, &bits));
        *in[i] = dev_alloc(n_in[i] * 2);
        CK(cudaMemcpy(*in[i], bits, n_in[i] * 2, cudaMemcpyHostToDevice));
        free(bits);
    }
    for (int s = 0; s < 2; s++) {
        b->out[s] = dev_alloc(b->nq * 2), b->dq[s] = dev_alloc(b->nq * 2);
        b->dk[s] = dev_alloc(b->nk * 2), b->dv[s] = dev_alloc(b->nk * 2);
        b->lse[s] = (float *)dev_alloc(b->nl * sizeof(float));
    }
    b->ws_bytes = ws_bytes;
    b->ws = dev_alloc(ws_bytes);
}

static void bufs_free(att_bufs *b) {
    void *p[] = {b->q, b->k, b->v, b->dout, b->ws};
    for (size_t i = 0; i < sizeof p / sizeof p[0]; i++) CK(cudaFree(p[i]));
    for (int s = 0; s < 2; s++) {
        void *o[] = {b->out[s], b->dq[s], b->dk[s], b->dv[s], b->lse[s]};
        for (int i = 0; i < 5; i++) CK(cudaFree(o[i]));
    }
}

/* Relative L2 distance of two bf16 device arrays, and the count of non-finite values in a or b. */
static double rel_l2_bf16(const void *a, const void *b, size_t n, size_t *bad) {
    uint16_t *ha = malloc(n * 2), *hb = malloc(n * 2);
    assert_true(ha && hb);
    CK(cudaMemcpy(ha, a, n * 2, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb, b, n * 2, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    *bad = 0;
    for (size_t i = 0; i < n; i++) {
        double x = zy_bf16_to_f32(ha[i]), y = zy_bf16_to_f32(hb[i]);
        if (!isfinite(x) || !isfinite(y)) {
            ++*bad;
            continue;
        }
        num += (x - y) * (x - y), den += y * y;
    }
    free(ha), free(hb);
    return sqrt(num / (den > 0 ? den : 1));
}

static double max_abs_f32(const float *a, const float *b, size_t n, size_t *bad) {
    float *ha = malloc(n * sizeof(float)), *hb = malloc(n * sizeof(float));
    assert_true(ha && hb);
    CK(cudaMemcpy(ha, a, n * sizeof(float), cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(hb, b, n * sizeof(float), cudaMemcpyDeviceToHost));
    double m = 0;
    *bad = 0;
    for (size_t i = 0; i < n; i++) {
        if (!isfinite(ha[i]) || !isfinite(hb[i])) {
            ++*bad;
            continue;
        }
        m = fmax(m, fabs((double)ha[i] - hb[i]));
    }
    free(ha), free(hb);
    return m;
}

/* The chunk limits of the chunked cases: chunks of at most max_chunk rows. */
static cudnn_attn_limits chunk_limits(int max_chunk) {
    cudnn_attn_limits l = {0, max_chunk};
    return l;
}

/* Prepares sh under limits l (NULL: the defaults) and checks how its backward runs: want_chunk
 * > 0, in chunks of that many rows; -1, in chunks of any size; 0, in one pass; -2, unchecked.
 * ZY_OK, or ZY_ERR when cuDNN refused the shape (the limits stay set). */
static int prepare_checked(const cudnn_attn_shape *sh, const cudnn_attn_limits *l, int want_chunk,
                           size_t *ws_fwd, size_t *ws_bwd) {
    cudnn_attn_set_limits(cudnn, l);
    int rc = cudnn_attn_prepare(cudnn, sh, ws_fwd, ws_bwd);
    printf("    B=%d T=%-5d Hq=%d Hk=%d d=%-3d win=%-4d", sh->B, sh->T, sh->Hq, sh->Hk, sh->d,
           sh->window);
    if (l)
        printf(" (cap %.1f MiB, chunks <= %d)", cudnn_attn_workspace_cap(cudnn) / 1048576.0,
               l->max_chunk);
    printf(": %s\n", cudnn_attn_describe(cudnn, sh));
    fflush(stdout);
    if (rc != ZY_OK) return ZY_ERR;
    cudnn_attn_plan_info info;
    if (cudnn_attn_plan_get(cudnn, sh, &info) != ZY_OK) fail_msg("%s", zy_errmsg());
    if (want_chunk > 0) assert_int_equal(info.chunk, want_chunk);
    if (want_chunk == -1) assert_true(info.chunk > 0);
    if (want_chunk == 0) assert_int_equal(info.chunk, 0);
    if (info.chunk > 0) {
        assert_int_equal(info.nchunks, (sh->T + info.chunk - 1) / info.chunk);
        assert_true(info.bwd_ws <= cudnn_attn_workspace_cap(cudnn));
    }
    return ZY_OK;
}

/* Both backends' forward and backward on one shape; cuDNN's outputs against zayac's. optional:
 * a refusal is printed and passes (cuda.attention = auto runs zayac's kernels there). l,
 * want_chunk: the limits and the chunking expected (prepare_checked); the defaults are restored
 * after. */
static void compare_limited(const cudnn_attn_shape *sh, int optional, const cudnn_attn_limits *l,
                            int want_chunk) {
    size_t ws_fwd = 0, ws_bwd = 0;
    int rc = prepare_checked(sh, l, want_chunk, &ws_fwd, &ws_bwd);
    if (rc != ZY_OK && optional) {
        cudnn_attn_set_limits(cudnn, NULL);
        return;
    }
    if (rc != ZY_OK) fail_msg("cuDNN refused the shape: %s", zy_errmsg());
    const size_t ours = cuda_attention_bwd_scratch_bytes(sh->B, sh->T, sh->Hq, sh->d);
    size_t ws = ws_fwd > ws_bwd ? ws_fwd : ws_bwd;
    att_bufs b;
    bufs_init(&b, sh, ws > ours ? ws : ours);
    const int B = sh->B, T = sh->T, Hq = sh->Hq, Hk = sh->Hk, d = sh->d, W = sh->window;
    if (cuda_attention_fwd(b.q, b.k, b.v, b.out[0], b.lse[0], B, T, Hq, Hk, d, sh->scale, W, 0) !=
            ZY_OK ||
        cuda_attention_bwd(b.dout, b.q, b.k, b.v, b.out[0], b.lse[0], b.dq[0], b.dk[0], b.dv[0],
                           b.ws, ours, B, T, Hq, Hk, d, sh->scale, W, 0) != ZY_OK)
        fail_msg("zayac: %s", zy_errmsg());
    CK(cudaDeviceSynchronize());
    if (cudnn_attn_fwd(cudnn, sh, b.q, b.k, b.v, b.out[1], b.lse[1], b.ws, b.ws_bytes) != ZY_OK ||
        cudnn_attn_bwd(cudnn, sh, b.dout, b.q, b.k, b.v, b.out[1], b.lse[1], b.dq[1], b.dk[1],
                       b.dv[1], b.ws, b.ws_bytes) != ZY_OK)
        fail_msg("cuDNN: %s", zy_errmsg());
    CK(cudaDeviceSynchronize());
    cudnn_attn_set_limits(cudnn, NULL);
    size_t bad[5];
    double e_out = rel_l2_bf16(b.out[1], b.out[0], b.nq, &bad[0]);
    double e_lse = max_abs_f32(b.lse[1], b.lse[0], b.nl, &bad[1]);
    double e_dq = rel_l2_bf16(b.dq[1], b.dq[0], b.nq, &bad[2]);
    double e_dk = rel_l2_bf16(b.dk[1], b.dk[0], b.nk, &bad[3]);
    double e_dv = rel_l2_bf16(b.dv[1], b.dv[0], b.nk, &bad[4]);
    printf("      cuDNN vs zayac: out %.2e, lse %.2e (max abs), dq %.2e, dk %.2e, dv %.2e "
           "(rel L2); non-finite %zu %zu %zu %zu %zu\n",
           e_out, e_lse, e_dq, e_dk, e_dv, bad[0], bad[1], bad[2], bad[3], bad[4]);
    fflush(stdout);
    bufs_free(&b);
    for (int i = 0; i < 5; i++) assert_int_equal(bad[i], 0);
    assert_true(e_out < 1e-2);
    assert_true(e_lse < 1e-3);
    assert_true(e_dq < 1e-2);
    assert_true(e_dk < 1e-2);
    assert_true(e_dv < 1e-2);
}

static void compare_case(const cudnn_attn_shape *sh, int optional) {
    compare_limited(sh, optional, NULL, -2);
}

static cudnn_attn_shape shape(int B, int T, int Hq, int Hk, int d, int window) {
    cudnn_attn_shape sh = {B, T, Hq, Hk, d, window, 1.0f / sqrtf((float)d), 1};
    return sh;
}

/* Small shapes: T a multiple of 128 and not, windows (shorter than a tile, not a multiple of one),
 * B > 1, Hq = Hk, d = 64. */
static void test_small(void **state) {
    (void)state;
    if (!have_cudnn()) skip();
    const cudnn_attn_shape cs[] = {
        shape(1, 128, 2, 1, 64, 0),    shape(2, 200, 8, 2, 128, 0),    shape(2, 256, 4, 4, 64, 0),
        shape(2, 384, 8, 2, 128, 100), shape(1, 1000, 8, 2, 128, 257), shape(3, 77, 4, 2, 128, 0),
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) compare_case(&cs[i], 0);
}

/* The ZAYA1 shapes: B x T = 8 x 2048, 4 x 4096, 1 x 32768 at Hq 8, Hk 2, d 128 (the last needs a
 * 16 GiB dP workspace for the deterministic backward: cuDNN may refuse it). */
static void test_zaya1(void **state) {
    (void)state;
    if (!have_cudnn()) skip();
    const cudnn_attn_shape cs[] = {shape(8, 2048, 8, 2, 128, 0), shape(4, 4096, 8, 2, 128, 0),
                                   shape(1, 32768, 8, 2, 128, 0)};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) compare_case(&cs[i], cs[i].T > 4096);
}

/* The backward in chunks of query rows, forced on small shapes by a chunk limit: T a multiple of
 * the chunk and not (a short last chunk, off 128), B > 1, windows (keys from the first block a
 * chunk sees; with T off 128 too), Hq = Hk at d 64. Then the chunk size chosen by a small
 * workspace cap. */
static void test_chunked(void **state) {
    (void)state;
    if (!have_cudnn()) skip();
    const struct {
        cudnn_attn_shape sh;
        int chunk;
    } cs[] = {
        {shape(1, 1024, 8, 2, 128, 0), 256},   {shape(1, 1000, 8, 2, 128, 0), 256},
        {shape(2, 1024, 8, 2, 128, 0), 256},   {shape(1, 1024, 8, 2, 128, 300), 256},
        {shape(2, 1000, 8, 2, 128, 129), 256}, {shape(2, 768, 4, 4, 64, 0), 256},
        {shape(3, 640, 8, 2, 128, 0), 384},
    };
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++) {
        const cudnn_attn_limits l = chunk_limits(cs[i].chunk);
        compare_limited(&cs[i].sh, 0, &l, cs[i].chunk);
    }
    /* a cap below the single pass's 16 MiB of dP: the largest chunk that fits it (3 MiB of fp32
     * dk, dv sums and bf16 parts, 16 bytes of dP per score of the largest chunk) */
    const cudnn_attn_limits capped = {(size_t)14 << 20, 0};
    compare_limited(&cs[0].sh, 0, &capped, -1);
}

/* The ZAYA1 shape B = 1, T = 8192 (Hq 8, Hk 2, d 128) chunked by the workspace cap alone: the cap
 * is what 4 chunks of 2048 rows need (measured with a chunk limit first). The largest chunk that
 * fits it makes 4 chunks too: 2048 rows, or up to 2304 (4 chunks whose largest, 2304 x 6912
 * scores, is smaller than 2048 x 8192). */
static void test_zaya1_chunked(void **state) {
    (void)state;
    if (!have_cudnn()) skip();
    const cudnn_attn_shape sh = shape(1, 8192, 8, 2, 128, 0);
    const cudnn_attn_limits probe = chunk_limits(2048);
    size_t ws_bwd = 0;
    if (prepare_checked(&sh, &probe, 2048, NULL, &ws_bwd) != ZY_OK) fail_msg("%s", zy_errmsg());
    const cudnn_attn_limits capped = {ws_bwd, 0};
    cudnn_attn_plan_info info;
    if (prepare_checked(&sh, &capped, -1, NULL, NULL) != ZY_OK ||
        cudnn_attn_plan_get(cudnn, &sh, &info) != ZY_OK)
        fail_msg("%s", zy_errmsg());
    assert_int_equal(info.nchunks, 4);
    compare_limited(&sh, 0, &capped, info.chunk);
}

/* The deterministic backward gives the same bits on every run (outputs and workspace poisoned in
 * between): what exact resume on the GPU needs. Single pass, then chunked. */
static void test_repeat(void **state) {
    (void)state;
    if (!have_cudnn()) skip();
    const struct {
        cudnn_attn_shape sh;
        int chunk;
    } cs[] = {{shape(2, 1000, 8, 2, 128, 0), 0},     {shape(8, 2048, 8, 2, 128, 0), 0},
              {shape(1, 600, 8, 2, 128, 129), 0},    {shape(2, 1000, 8, 2, 128, 0), 256},
              {shape(1, 1024, 8, 2, 128, 300), 256}, {shape(1, 8192, 8, 2, 128, 0), 2048}};
    for (size_t c = 0; c < sizeof cs / sizeof cs[0]; c++) {
        const cudnn_attn_shape *sh = &cs[c].sh;
        const cudnn_attn_limits l = chunk_limits(cs[c].chunk);
        size_t ws_fwd = 0, ws_bwd = 0;
        if (prepare_checked(sh, cs[c].chunk ? &l : NULL, cs[c].chunk, &ws_fwd, &ws_bwd) != ZY_OK)
            fail_msg("%s", zy_errmsg());
        att_bufs b;
        bufs_init(&b, sh, ws_fwd > ws_bwd ? ws_fwd : ws_bwd);
        if (cudnn_attn_fwd(cudnn, sh, b.q, b.k, b.v, b.out[1], b.lse[1], b.ws, b.ws_bytes) != ZY_OK)
            fail_msg("%s", zy_errmsg());
        void *g[3] = {b.dq[1], b.dk[1], b.dv[1]};
        const size_t n[3] = {b.nq, b.nk, b.nk};
        uint16_t *first[3], *cur = malloc(b.nq * 2);
        size_t diff[3] = {0, 0, 0};
        assert_non_null(cur);
        for (int i = 0; i < 3; i++) assert_non_null(first[i] = malloc(n[i] * 2));
        for (int r = 0; r < 3; r++) {
            for (int i = 0; i < 3; i++) CK(cudaMemset(g[i], 0xff, n[i] * 2));
            CK(cudaMemset(b.ws, 0xff, b.ws_bytes ? b.ws_bytes : 1));
            if (cudnn_attn_bwd(cudnn, sh, b.dout, b.q, b.k, b.v, b.out[1], b.lse[1], g[0], g[1],
                               g[2], b.ws, b.ws_bytes) != ZY_OK)
                fail_msg("%s", zy_errmsg());
            CK(cudaDeviceSynchronize());
            for (int i = 0; i < 3; i++) {
                uint16_t *dst = r == 0 ? first[i] : cur;
                CK(cudaMemcpy(dst, g[i], n[i] * 2, cudaMemcpyDeviceToHost));
                if (r > 0)
                    for (size_t e = 0; e < n[i]; e++) diff[i] += first[i][e] != cur[e];
            }
        }
        size_t nan = 0;
        for (int i = 0; i < 3; i++)
            for (size_t e = 0; e < n[i]; e++) nan += (first[i][e] & 0x7fff) > 0x7f80;
        printf("      3 runs: elements differing from run 1: dq %zu dk %zu dv %zu; NaN %zu\n",
               diff[0], diff[1], diff[2], nan);
        fflush(stdout);
        cudnn_attn_set_limits(cudnn, NULL);
        for (int i = 0; i < 3; i++) free(first[i]);
        free(cur);
        bufs_free(&b);
        assert_int_equal(nan, 0);
        assert_int_equal(diff[0] + diff[1] + diff[2], 0);
    }
}

/* Shapes cuDNN cannot take are refused with the reason, the same on a second call, and leave no
 * error behind them for the others. */
static void test_refused(void **state) {
    (void)state;
    if (!have_cudnn()) skip();
    const struct {
        cudnn_attn_shape sh;
        const char *why;
    } cs[] = {{shape(1, 1, 8, 2, 128, 0), "T = 1"},
              {shape(1, 64, 8, 2, 132, 0), "head dim 132"},
              {shape(1, 64, 6, 4, 64, 0), "impossible shape"}};
    for (size_t i = 0; i < sizeof cs / sizeof cs[0]; i++)
        for (int rep = 0; rep < 2; rep++) {
            assert_int_equal(cudnn_attn_prepare(cudnn, &cs[i].sh, NULL, NULL), ZY_ERR);
            if (!strstr(zy_errmsg(), cs[i].why))
                fail_msg("expected '%s' in '%s'", cs[i].why, zy_errmsg());
            assert_int_equal(cudnn_attn_seen(cudnn, &cs[i].sh), 1);
        }
    cudnn_attn_shape ok = shape(1, 128, 2, 1, 64, 0);
    if (cudnn_attn_prepare(cudnn, &ok, NULL, NULL) != ZY_OK) fail_msg("%s", zy_errmsg());
}

#else
static void test_small(void **state) {
    (void)state;
    skip();
}
static void test_zaya1(void **state) {
    (void)state;
    skip();
}
static void test_repeat(void **state) {
    (void)state;
    skip();
}
static void test_chunked(void **state) {
    (void)state;
    skip();
}
static void test_zaya1_chunked(void **state) {
    (void)state;
    skip();
}
static void test_refused(void **state) {
    (void)state;
    skip();
}
#endif

/* The memory estimate's attention workspace: zayac's scratch with cuda.attention = zayac; with
 * auto and cuDNN loaded, the larger of it and cuda.attention_workspace_gib, the cap cuDNN's
 * backward stays within; and mem_need counts it in the device total. */
static void test_workspace_estimate(void **state) {
    (void)state;
#ifdef ZY_HAVE_CUDA
    if (ops_cuda_device_count() == 0) skip();
    zy_cuda_opts oz = ops_cuda_opts_default(), oa = ops_cuda_opts_default();
    oz.attention = ZY_ATTN_ZAYAC;
    oa.attention = ZY_ATTN_AUTO;
    oa.attention_workspace_gib = 8;
    zy_ctx cz, ca;
    if (ops_ctx_init_cuda_opts(&cz, 0, &oz) != ZY_OK ||
        ops_ctx_init_cuda_opts(&ca, 0, &oa) != ZY_OK)
        fail_msg("%s", zy_errmsg());
    zy_config cfg;
    if (config_preset_builtin(&cfg, "bench-small") != ZY_OK) fail_msg("%s", zy_errmsg());
    const int B = 1, T = 32768, Hq = cfg.num_attention_heads, d = cfg.head_dim;
    const size_t ours = cuda_attention_bwd_scratch_bytes(B, T, Hq, d), cap = (size_t)8 << 30;
    assert_true(ours > 0);
    assert_int_equal(ops_attention_workspace_bytes(&cz, B, T, Hq, d), ours);
    const size_t auto_ws = ops_attention_workspace_bytes(&ca, B, T, Hq, d);
    printf("      workspace at 1 x 32768: zayac's %.2f GiB, auto with an 8 GiB cap %.2f GiB (cuDNN "
           "%ld)\n",
           ours / 1073741824.0, auto_ws / 1073741824.0, cudnn_attn_version());
    assert_int_equal(auto_ws, cudnn_attn_version() > 0 ? (ours > cap ? ours : cap) : ours);
    zy_optim_config oc;
    optim_config_default(&oc);
    zy_mem_need need;
    mem_need(&ca, &cfg, B, T, 0, &oc, 1, &need);
    assert_true(need.workspace == (double)auto_ws);
    assert_true(need.device == need.weights + need.grads + need.optim + need.acts + need.workspace);
    mem_need(&ca, &cfg, B, T, 0, NULL, 1, &need); /* inference: no backward */
    assert_true(need.workspace == 0);
    ops_ctx_free(&ca);
    ops_ctx_free(&cz);
#else
    skip();
#endif
}

/* cuda.attention_workspace_gib = auto (the default): the cap starts at 2 GiB and grows to exactly
 * what cuDNN's one-pass backward wants for the job's largest shape, when its allocation (a quarter
 * past) fits the cap plus the spare memory; otherwise it stays. Never down, never past 64 GiB; a
 * fixed cap and zayac's kernels do not move. mem_grow_workspace gives it what a job leaves past
 * the reserve and counts it in the estimate; at 1 x 32768 the grown cap is one pass, one byte less
 * is chunks. */
static void test_workspace_grows_under_auto(void **state) {
    (void)state;
#ifdef ZY_HAVE_CUDA
    if (ops_cuda_device_count() == 0) skip();
    zy_ctx ca, cf, cz;
    zy_cuda_opts of = ops_cuda_opts_default(), oz = ops_cuda_opts_default();
    of.attention_workspace_gib = 8;
    oz.attention = ZY_ATTN_ZAYAC;
    if (ops_ctx_init_cuda(&ca, 0) != ZY_OK || ops_ctx_init_cuda_opts(&cf, 0, &of) != ZY_OK ||
        ops_ctx_init_cuda_opts(&cz, 0, &oz) != ZY_OK)
        fail_msg("%s", zy_errmsg());
    const double G = 1073741824.0;
    zy_config cfg;
    if (config_preset_builtin(&cfg, "bench-small") != ZY_OK) fail_msg("%s", zy_errmsg());
    const int B = 1, T = 32768, Hq = cfg.num_attention_heads, Hk = cfg.num_key_value_heads,
              d = cfg.head_dim;
    assert_int_equal(ops_attention_workspace_wanted(&cz, B, T, Hq, Hk, d), 0);
    assert_int_equal(ops_attention_workspace_grow(&cz, (size_t)(10 * G), (size_t)(100 * G)), 0);
    if (cudnn_attn_version() == 0) {
        assert_int_equal(ops_attention_workspace_wanted(&ca, B, T, Hq, Hk, d), 0);
        assert_int_equal(ops_attention_workspace_grow(&ca, (size_t)(10 * G), (size_t)(100 * G)), 0);
    } else {
        const size_t base = (size_t)(2 * G);
        const size_t want = ops_attention_workspace_wanted(&ca, B, T, Hq, Hk, d);
        printf("      1 x 32768: one-pass backward workspace %.3f GiB\n", want / G);
        assert_true(want >= (size_t)(16 * G) && want < (size_t)(17 * G)); /* dP: B Hq T^2 bf16 */
        assert_int_equal(ops_attention_workspace_wanted(&cf, B, T, Hq, Hk, d), 0);
        assert_true(ops_attention_workspace_grow(&cf, want, (size_t)(100 * G)) == (size_t)(8 * G));
        const size_t room = (size_t)(1.25 * (double)want) - base; /* the spare it needs */
        assert_true(ops_attention_workspace_grow(&ca, want, room - (1 << 20)) == base);
        assert_true(ops_attention_workspace_grow(&ca, want, room + 1) == want);
        assert_true(ops_attention_workspace_grow(&ca, (size_t)G, (size_t)(100 * G)) == want);
        assert_true(ops_attention_workspace_bytes(&ca, B, T, Hq, d) == want);
        zy_ctx cb;
        if (ops_ctx_init_cuda(&cb, 0) != ZY_OK) fail_msg("%s", zy_errmsg());
        assert_true(ops_attention_workspace_grow(&cb, (size_t)(65 * G), (size_t)(1000 * G)) ==
                    base);
        /* the plans under the grown cap and one byte under it */
        cudnn_attn_shape sh = shape(B, T, Hq, Hk, d, 0);
        cudnn_attn *h_want, *h_less;
        if (cudnn_attn_create(&h_want, 0, want) != ZY_OK ||
            cudnn_attn_create(&h_less, 0, want - 1) != ZY_OK)
            fail_msg("%s", zy_errmsg());
        cudnn_attn_plan_info one, less;
        if (cudnn_attn_plan_get(h_want, &sh, &one) != ZY_OK ||
            cudnn_attn_plan_get(h_less, &sh, &less) != ZY_OK)
            fail_msg("%s", zy_errmsg());
        printf("      under the grown cap: %s; one byte less: %d chunks\n",
               one.chunk ? "chunks" : "one pass", less.nchunks);
        assert_int_equal(one.chunk, 0);
        assert_true(less.chunk > 0 && less.nchunks > 1);
        cudnn_attn_destroy(h_want);
        cudnn_attn_destroy(h_less);
        /* mem_grow_workspace: a job leaving a quarter GiB too little, then a quarter GiB more */
        const double avail = (double)ops_mem_available(&cb);
        const double reserve = fmax(MEM_RESERVE_BYTES, MEM_RESERVE_FRACTION * avail);
        if (avail - reserve < (double)room + 4 * G) {
            printf("      %.1f GiB available: too little for the estimate cases\n", avail / G);
        } else {
            zy_mem_need need = {.workspace = (double)base};
            need.device = avail - reserve - (double)room + 0.25 * G;
            assert_true(mem_grow_workspace(&cb, &need, want) == base);
            assert_true(need.workspace == (double)base);
            need.device -= 0.5 * G;
            const double before = need.device;
            assert_true(mem_grow_workspace(&cb, &need, want) == want);
            assert_true(need.workspace == (double)want);
            assert_true(need.device == before + (double)want - (double)base);
        }
        ops_ctx_free(&cb);
    }
    ops_ctx_free(&ca);
    ops_ctx_free(&cf);
    ops_ctx_free(&cz);
#else
    skip();
#endif
}

int main(void) {
#ifdef ZY_HAVE_CUDA
    rng = zy_rng_init(20261125, 19);
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refused),
        cmocka_unit_test(test_small),
        cmocka_unit_test(test_chunked),
        cmocka_unit_test(test_repeat),
        cmocka_unit_test(test_zaya1_chunked),
        cmocka_unit_test(test_zaya1),
        cmocka_unit_test(test_workspace_estimate),
        cmocka_unit_test(test_workspace_grows_under_auto),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
