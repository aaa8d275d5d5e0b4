/* CPU reference op: summed cross-entropy over the vocabulary with ignore_index, and its logits
 * gradient (softmax - onehot) * grad_scale. exp(x - max) in fp32 (as torch's fp32 softmax), the
 * per-row sum and log in double; the loss sum is added over fixed row chunks in order, so it does
 * not depend on the thread count. */
#include "ops/cpu/cpu_ops.h"

#include "base/err.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

/* Returns sum over counted rows of lse(logits[n]) - logits[n, target]; *count = counted rows. */
double cpu_xent_fwd_bwd(int nt, float *dlogits, const float *logits, const int32_t *targets, int N,
                        int V, int ignore_index, float grad_scale, int *count) {
    int nchunk = (N + CPU_ROW_CHUNK - 1) / CPU_ROW_CHUNK;
    double *part = zy_calloc((size_t)nchunk + 1, sizeof(double));
    int *cnt = zy_calloc((size_t)nchunk + 1, sizeof(int));
#pragma omp parallel for num_threads(nt) schedule(static) if ((size_t)N * V >= CPU_PAR_MIN / 4)
    for (int ch = 0; ch < nchunk; ch++) {
        int n1 = (ch + 1) * CPU_ROW_CHUNK < N ? (ch + 1) * CPU_ROW_CHUNK : N;
        for (int n = ch * CPU_ROW_CHUNK; n < n1; n++) {
            const float *x = logits + (size_t)n * V;
            int y = targets[n];
            if (y == ignore_index) {
                if (dlogits) memset(dlogits + (size_t)n * V, 0, (size_t)V * sizeof(float));
                continue;
            }
            ZY_CHECKF(y >= 0 && y < V, "xent: target[%d] = %d not in [0, %d)", n, y, V);
            float mx = x[0];
            for (int v = 1; v < V; v++)
                if (x[v] > mx) mx = x[v];
            double xy = x[y], sum = 0;
            if (dlogits) {
                /* exp(x - max) is kept in dlogits (which may alias x: each x[v] is read before
                 * its slot is written), then scaled once the sum is known */
                float *g = dlogits + (size_t)n * V;
                for (int v = 0; v < V; v++) {
                    float e = expf(x[v] - mx);
                    g[v] = e;
                    sum += e;
                }
                float a = (float)(grad_scale / sum);
                for (int v = 0; v < V; v++) g[v] *= a;
                g[y] -= grad_scale;
            } else {
                for (int v = 0; v < V; v++) sum += expf(x[v] - mx);
            }
            part[ch] += mx + log(sum) - xy;
            cnt[ch]++;
        }
    }
    double total = 0;
    int c = 0;
    for (int ch = 0; ch < nchunk; ch++) {
        total += part[ch];
        c += cnt[ch];
    }
    free(part);
    free(cnt);
    if (count) *count = c;
    return total;
}
