/* CPU reference of the router's depth-averaging step (ops_eda_*, see ops.h). */
#include "ops/cpu/cpu_ops.h"

void cpu_eda_fwd(int nt, float *z, const float *r_prev, const float *g, int N, int R) {
#pragma omp parallel for num_threads(nt) if ((size_t)N * R >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++)
        for (int r = 0; r < R; r++) z[(size_t)n * R + r] += r_prev[(size_t)n * R + r] * g[r];
}

void cpu_eda_bwd(int nt, float *dr_prev, float *dg, const float *dz, const float *r_prev,
                 const float *g, int N, int R) {
#pragma omp parallel for num_threads(nt) if ((size_t)N * R >= CPU_PAR_MIN)
    for (int n = 0; n < N; n++)
        for (int r = 0; r < R; r++) dr_prev[(size_t)n * R + r] = dz[(size_t)n * R + r] * g[r];
#pragma omp parallel for num_threads(nt) if ((size_t)N * R >= CPU_PAR_MIN)
    for (int r = 0; r < R; r++) {
        double s = 0;
        for (int n = 0; n < N; n++) s += (double)dz[(size_t)n * R + r] * r_prev[(size_t)n * R + r];
        dg[r] += (float)s;
    }
}
