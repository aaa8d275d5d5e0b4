/* CPU reference ops for top-1 MoE routing: router softmax + biased choice + gate and its backward,
 * the deterministic (stable counting sort) dispatch of rows to experts, gather, combine and the
 * scatter-add of expert input gradients. */
#include "ops/cpu/cpu_ops.h"

#include "base/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* probs = softmax(logits) per row; choice = first argmax of probs + bias; gate = probs[choice], or
 * 0 when the choice is the skip class E1-1. */
void cpu_router_select(int nt, float *probs, int32_t *choice, float *gate, const float *logits,
                       const float *bias, int N, int E1) {
    ZY_CHECK(E1 >= 1);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * E1 >= CPU_PAR_MIN / 4)
    for (int n = 0; n < N; n++) {
        const float *x = logits + (size_t)n * E1;
        float *p = probs + (size_t)n * E1;
        float mx = x[0];
        for (int e = 1; e < E1; e++)
            if (x[e] > mx) mx = x[e];
        double sum = 0;
        for (int e = 0; e < E1; e++) sum += exp((double)(x[e] - mx));
        int best = 0;
        float bestv = 0;
        for (int e = 0; e < E1; e++) {
            p[e] = (float)(exp((double)(x[e] - mx)) / sum);
            float val = p[e] + bias[e];
            if (e == 0 || val > bestv) { /* strict: the first index wins ties */
                best = e;
                bestv = val;
            }
        }
        choice[n] = best;
        gate[n] = best == E1 - 1 ? 0.0f : p[best];
    }
}

/* dlogits[n,k] = dgate[n] p_c (delta_kc - p_k) with c = choice[n]; zero rows for skip. */
void cpu_router_bwd(int nt, float *dlogits, const float *dgate, const float *probs,
                    const int32_t *choice, int N, int E1) {
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * E1 >= CPU_PAR_MIN / 4)
    for (int n = 0; n < N; n++) {
        const float *p = probs + (size_t)n * E1;
        float *g = dlogits + (size_t)n * E1;
        int c = choice[n];
        if (c == E1 - 1) {
            memset(g, 0, (size_t)E1 * sizeof(float));
            continue;
        }
        double a = (double)dgate[n] * p[c];
        for (int e = 0; e < E1; e++) g[e] = (float)(a * ((e == c ? 1.0 : 0.0) - p[e]));
    }
}

/* Stable counting sort of the routed rows by expert, then the skipped rows; returns the number
 * of routed rows. */
int cpu_moe_dispatch(int32_t *counts, int32_t *offsets, int32_t *perm, const int32_t *choice, int N,
                     int E) {
    memset(counts, 0, (size_t)E * sizeof(int32_t));
    for (int n = 0; n < N; n++) {
        ZY_CHECKF(choice[n] >= 0 && choice[n] <= E, "moe_dispatch: choice[%d] = %d not in [0, %d]",
                  n, choice[n], E);
        if (choice[n] < E) counts[choice[n]]++;
    }
    offsets[0] = 0;
    for (int e = 0; e < E; e++) offsets[e + 1] = offsets[e] + counts[e];
    /* fill positions walk forward in n, so rows of one expert keep their order */
    int32_t *next = zy_malloc(((size_t)E + 1) * sizeof(int32_t));
    memcpy(next, offsets, ((size_t)E + 1) * sizeof(int32_t));
    for (int n = 0; n < N; n++) /* the skipped rows after the routed ones */
        perm[next[choice[n]]++] = n;
    free(next);
    return offsets[E];
}

/* xs[r,:] = x[perm[r],:]. */
void cpu_gather_rows(int nt, float *xs, const float *x, const int32_t *perm, int nrows, int C) {
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)nrows * C >= CPU_PAR_MIN)
    for (int r = 0; r < nrows; r++)
        memcpy(xs + (size_t)r * C, x + (size_t)perm[r] * C, (size_t)C * sizeof(float));
}

/* y = 0, then y[perm[r]] = gate[perm[r]] * ys[r] where the gate is not 0 (perm rows are
 * distinct, as from dispatch). */
void cpu_moe_combine(int nt, float *y, const float *ys, const float *gate, const int32_t *perm,
                     int nrows, int N, int D) {
    cpu_fill(nt, y, 0.0f, (size_t)N * D);
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)nrows * D >= CPU_PAR_MIN)
    for (int r = 0; r < nrows; r++) {
        int n = perm[r];
        float gv = gate[n], *yr = y + (size_t)n * D;
        const float *s = ys + (size_t)r * D;
        if (gv == 0.0f) continue; /* a skipped row: ys's row is not read */
        for (int c = 0; c < D; c++) yr[c] = gv * s[c];
    }
}

/* dys[r] = gate dy[perm[r]]; dgate[n] = dy[n].ys[r] for routed rows, 0 for the others. */
void cpu_moe_combine_bwd(int nt, float *dys, float *dgate, const float *dy, const float *ys,
                         const float *gate, const int32_t *perm, int nrows, int N, int D) {
    memset(dgate, 0, (size_t)N * sizeof(float));
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)nrows * D >= CPU_PAR_MIN)
    for (int r = 0; r < nrows; r++) {
        int n = perm[r];
        float gv = gate[n];
        const float *g = dy + (size_t)n * D, *s = ys + (size_t)r * D;
        float *o = dys + (size_t)r * D;
        double dot = 0;
        for (int c = 0; c < D; c++) {
            o[c] = gv * g[c];
            dot += (double)g[c] * s[c];
        }
        dgate[n] = (float)dot;
    }
}

/* dx[perm[r]] += dxs[r]. Parallel over column blocks, so repeated rows in perm cannot race. */
void cpu_scatter_add_rows(int nt, float *dx, const float *dxs, const int32_t *perm, int nrows,
                          int C) {
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)nrows * C >= CPU_PAR_MIN)
    for (int c0 = 0; c0 < C; c0 += CPU_COL_BLOCK) {
        int c1 = c0 + CPU_COL_BLOCK < C ? c0 + CPU_COL_BLOCK : C;
        for (int r = 0; r < nrows; r++) {
            float *o = dx + (size_t)perm[r] * C;
            const float *s = dxs + (size_t)r * C;
            for (int c = c0; c < c1; c++) o[c] += s[c];
        }
    }
}
