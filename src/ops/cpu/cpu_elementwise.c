/* CPU reference ops: exact (erf) GELU and the SwiGLU of the experts, forward and backward.
 * Transcendentals are evaluated in double and rounded once. */
#include "ops/cpu/cpu_ops.h"

#include <math.h>

#define INV_SQRT2    0.70710678118654752440
#define INV_SQRT_2PI 0.39894228040143267794

/* y = x Phi(x) = x (1 + erf(x/sqrt 2)) / 2. */
void cpu_gelu_fwd(int nt, float *y, const float *x, size_t n) {
#pragma omp parallel for num_threads(nt) schedule(static) if (n >= CPU_PAR_MIN / 4)
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        y[i] = (float)(0.5 * v * (1.0 + erf(v * INV_SQRT2)));
    }
}

/* dx = dy (Phi(x) + x phi(x)). */
void cpu_gelu_bwd(int nt, float *dx, const float *dy, const float *x, size_t n) {
#pragma omp parallel for num_threads(nt) schedule(static) if (n >= CPU_PAR_MIN / 4)
    for (size_t i = 0; i < n; i++) {
        double v = x[i];
        double cdf = 0.5 * (1.0 + erf(v * INV_SQRT2)), pdf = INV_SQRT_2PI * exp(-0.5 * v * v);
        dx[i] = (float)((double)dy[i] * (cdf + v * pdf));
    }
}

/* y[n,f] = SiLU(g) * u with gu row = [g (F) | u (F)], SiLU(g) = g / (1 + exp(-g)). */
void cpu_swiglu_fwd(int nt, float *y, const float *gu, int N, int F) {
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * F >= CPU_PAR_MIN / 4)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * F, *u = g + F;
        float *yr = y + (size_t)n * F;
        for (int f = 0; f < F; f++) {
            double gv = g[f];
            float s = (float)(gv / (1.0 + exp(-gv)));
            yr[f] = s * u[f];
        }
    }
}

/* dg = dy u sigma(g) (1 + g (1 - sigma(g))), du = dy SiLU(g). Overwrites dgu. */
void cpu_swiglu_bwd(int nt, float *dgu, const float *dy, const float *gu, int N, int F) {
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * F >= CPU_PAR_MIN / 4)
    for (int n = 0; n < N; n++) {
        const float *g = gu + (size_t)n * 2 * F, *u = g + F;
        const float *gr = dy + (size_t)n * F;
        float *dg = dgu + (size_t)n * 2 * F, *du = dg + F;
        for (int f = 0; f < F; f++) {
            double gv = g[f], sig = 1.0 / (1.0 + exp(-gv));
            du[f] = (float)((double)gr[f] * gv * sig);
            dg[f] = (float)((double)gr[f] * u[f] * sig * (1.0 + gv * (1.0 - sig)));
        }
    }
}
