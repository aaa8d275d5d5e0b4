/* Op cases of causal GQA attention (forward and backward through ops.h, the default kernels) for
 * the op harness (op_harness.h). Relative L2 error of out, dq, dk, dv under 1e-2 (bf16 operands of
 * the matrix products and bf16 outputs put it near 3e-3; the probabilities are rounded to bf16
 * before the PV product), lse within 1e-3 absolute, every output element written (outputs start as
 * NaN). Where dq and dk are zero analytically (T = 1, a window of 1: one visible key) both sides
 * hold rounding noise ~1e-7 of the scores' scale, so those bounds are absolute. Shapes cover T not
 * a multiple of the tiles, T = 1, Hq = Hk, Hk = 1, small head dims, sliding windows shorter than a
 * tile, not a multiple of one, 1 and longer than T, and a ZAYA1-sized sequence. The kernel variants
 * (tile shapes, dq paths) are tested in test_cuda_attention.c. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "op_cases.h"

#include <math.h>

/* p: B, T, Hq, Hk, d, window, measure of dq, dk where they vanish (0: |err| <= 1e-5 at T = 1;
 * 1: RMS err <= 1e-4 wherever the reference's RMS is under 1e-4) */
static void case_attention(oh_run *r, const int *p) {
    zy_ctx *c = oh_ctx(r);
    const int B = p[0], T = p[1], Hq = p[2], Hk = p[3], d = p[4], window = p[5], N = B * T;
    size_t nq = (size_t)N * Hq * d, nk = (size_t)N * Hk * d, nl = (size_t)B * Hq * T;
    float scale = 1.0f / sqrtf((float)d);
    zy_act *q = oh_act(r, oh_randn(r, nq, 1.0f), nq), *k = oh_act(r, oh_randn(r, nk, 1.0f), nk);
    zy_act *v = oh_act(r, oh_randn(r, nk, 1.0f), nk), *dout = oh_act(r, oh_randn(r, nq, 1), nq);
    zy_act *out = oh_nan_act(r, nq), *dq = oh_nan_act(r, nq), *dk = oh_nan_act(r, nk);
    zy_act *dv = oh_nan_act(r, nk);
    float *lse = oh_nan_f32(r, nl);
    ops_attention_fwd(c, out, lse, q, k, v, B, T, Hq, Hk, d, scale, window);
    ops_attention_bwd(c, dq, dk, dv, dout, out, lse, q, k, v, B, T, Hq, Hk, d, scale, window);
    oh_measure l2 = oh_l2(1e-2, p[6] ? 1e-4 : 0), mz = l2;
    if (!p[6] && T == 1) mz = oh_bound(0.0, 1e-5, NULL);
    const char *fmt = "attention B=%d T=%d Hq=%d Hk=%d d=%d window=%d %s";
    oh_out_act(r, l2, out, nq, fmt, B, T, Hq, Hk, d, window, "out");
    oh_out_f32(r, oh_bound(0.0, 1e-3, NULL), lse, nl, fmt, B, T, Hq, Hk, d, window, "lse");
    oh_out_act(r, mz, dq, nq, fmt, B, T, Hq, Hk, d, window, "dq");
    oh_out_act(r, mz, dk, nk, fmt, B, T, Hq, Hk, d, window, "dk");
    oh_out_act(r, l2, dv, nk, fmt, B, T, Hq, Hk, d, window, "dv");
}

const oh_case oh_cases_attention[] = {
    {"attention", case_attention, {2, 37, 8, 2, 64, 0, 0}},
    {"attention", case_attention, {2, 128, 8, 2, 128, 0, 0}},
    {"attention", case_attention, {2, 128, 8, 2, 128, 16, 0}},
    {"attention", case_attention, {2, 1, 8, 2, 128, 0, 0}},
    /* T off the tile sizes, T = 1, Hq = Hk, Hk = 1, small head dims */
    {"attention", case_attention, {2, 100, 4, 2, 64, 0, 1}},
    {"attention", case_attention, {1, 1, 8, 2, 128, 0, 1}},
    {"attention", case_attention, {3, 1, 4, 4, 64, 0, 1}},
    {"attention", case_attention, {2, 300, 2, 2, 128, 0, 1}},
    {"attention", case_attention, {1, 257, 8, 2, 128, 0, 1}},
    {"attention", case_attention, {2, 130, 4, 1, 32, 0, 1}},
    {"attention", case_attention, {2, 77, 6, 3, 16, 0, 1}},
    {"attention", case_attention, {1, 64, 8, 2, 128, 0, 1}},
    {"attention", case_attention, {1, 129, 2, 1, 64, 0, 1}},
    /* sliding windows: shorter than a tile, not a multiple of one, 1, longer than T */
    {"attention", case_attention, {1, 257, 8, 2, 128, 50, 1}},
    {"attention", case_attention, {2, 200, 4, 2, 64, 100, 1}},
    {"attention", case_attention, {1, 90, 2, 1, 128, 1, 1}},
    {"attention", case_attention, {1, 70, 4, 2, 32, 500, 1}},
    {"attention", case_attention, {1, 600, 4, 1, 128, 129, 1}},
    {"attention", case_attention, {1, 333, 4, 4, 16, 17, 1}},
    /* a ZAYA1-sized sequence */
    {"attention", case_attention, {1, 2048, 8, 2, 128, 0, 1}},
};
const int oh_ncases_attention = (int)(sizeof oh_cases_attention / sizeof oh_cases_attention[0]);
