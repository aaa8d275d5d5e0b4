/* CPU reference of the router's depth-averaging step (ops_eda_*, see ops.h). */
#include "ops/ops.h"

void ops_eda_fwd(zy_ctx *ctx, float *z, const float *r_prev, const float *g, int N, int R) {
    (void)ctx;
#pragma omp parallel for
    for (int n = 0; n < N; n++)
        for (int r = 0; r < R; r++) z[(size_t)n * R + r] += r_prev[(size_t)n * R + r] * g[r];
}

void ops_eda_bwd(zy_ctx *ctx, float *dr_prev, float *dg, const float *dz, const float *r_prev,
                 const float *g, int N, int R) {
    (void)ctx;
#pragma omp parallel for
    for (int n = 0; n < N; n++)
        for (int r = 0; r < R; r++) dr_prev[(size_t)n * R + r] = dz[(size_t)n * R + r] * g[r];
#pragma omp parallel for
    for (int r = 0; r < R; r++) {
        double s = 0;
        for (int n = 0; n < N; n++) s += (double)dz[(size_t)n * R + r] * r_prev[(size_t)n * R + r];
        dg[r] += (float)s;
    }
}
