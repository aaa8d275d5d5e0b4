/* GEMM benchmark: shapes, quantisation model, observations, result files (see gemm.h). */
#include "bench/gemm.h"
#include "base/err.h"
#include "base/plot.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const int square_sizes[] = {256, 512, 1024, 2048, 4096, 8192, 16384};
static const int grid_sizes[] = {512, 1024, 2048, 4096, 8192, 16384};
static const int align_bases[] = {1024, 4096};
static const int align_offsets[] = {-64, -1, 0, 1, 8, 64, 128, 256};
#define NSQUARE (int)(sizeof square_sizes / sizeof square_sizes[0])
#define NGRID   (int)(sizeof grid_sizes / sizeof grid_sizes[0])
#define NBASE   (int)(sizeof align_bases / sizeof align_bases[0])
#define NOFF    (int)(sizeof align_offsets / sizeof align_offsets[0])
#define GRID_K  4096

const char *bench_gemm_layout_name(bench_gemm_layout l) {
    switch (l) {
    case GEMM_XWT:
        return "XW^T";
    case GEMM_XW:
        return "XW";
    case GEMM_XTW:
        return "X^TW";
    }
    return "?";
}

void bench_gemm_opts_default(bench_gemm_opts *o) {
    memset(o, 0, sizeof *o);
    o->dtypes[0] = BENCH_BF16;
    o->dtypes[1] = BENCH_TF32;
    o->dtypes[2] = BENCH_FP32;
    o->ndtypes = 3;
    o->tokens = 16384;
    snprintf(o->presets, sizeof o->presets, "bench-small,zaya1-base");
    o->target_ms = 50;
    o->warmup_ms = 50;
    o->algos = 1;
    o->check = 1;
    o->workspace = 32u << 20;
    o->out_dir = "zayac-bench";
}

void bench_gemm_result_init(bench_gemm_result *r) {
    memset(r, 0, sizeof *r);
}

void bench_gemm_result_free(bench_gemm_result *r) {
    free(r->rows);
    memset(r, 0, sizeof *r);
}

void bench_gemm_result_add(bench_gemm_result *r, const bench_gemm_row *row) {
    if (r->nrows == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 128;
        r->rows = zy_realloc(r->rows, sizeof(bench_gemm_row) * (size_t)r->cap);
    }
    r->rows[r->nrows++] = *row;
}

static bench_gemm_shape mk(int m, int n, int k, bench_gemm_layout l, const char *group,
                           const char *label) {
    bench_gemm_shape s;
    memset(&s, 0, sizeof s);
    s.m = m, s.n = n, s.k = k, s.layout = l;
    snprintf(s.group, sizeof s.group, "%s", group);
    snprintf(s.label, sizeof s.label, "%s", label);
    return s;
}

/* The model dimensions of a preset (ZAYA1 spec; bench-small is the BASELINES.md config). */
typedef struct {
    const char *name;
    int d, hq, hk, hd, e, f, r, v;
} preset_dims;

static const preset_dims presets[] = {
    {"bench-small", 1024, 8, 2, 128, 16, 1024, 256, 32768},
    {"zaya1-base", 2048, 8, 2, 128, 16, 2048, 256, 262272},
    {"bench-base", 2048, 8, 2, 128, 16, 2048, 256, 262272}, /* zaya1-base's widths, 8 layers */
};

int bench_gemm_preset_shapes(const char *preset, int tokens, bench_gemm_shape *out, int max) {
    const preset_dims *p = NULL;
    for (size_t i = 0; i < sizeof presets / sizeof presets[0]; i++)
        if (!strcmp(presets[i].name, preset)) p = &presets[i];
    if (!p)
        return zy_fail("unknown preset '%s' (expected bench-small, bench-base or zaya1-base)",
                       preset);
    if (tokens < 1) return zy_fail("tokens per step must be positive, got %d", tokens);
    int per_expert = tokens / p->e > 0 ? tokens / p->e : 1; /* balanced top-1 routing */
    /* A linear layer Y[M,N] = X[M,K] W[N,K]^T; qkv fuses q (Hq*d), k (Hk*d) and the current and
     * delayed value projections (Hk*d/2 each). */
    struct {
        const char *name;
        int m, n, k;
    } lin[] = {
        {"qkv", tokens, (p->hq + 2 * p->hk) * p->hd, p->d},
        {"o_proj", tokens, p->d, p->hq * p->hd},
        {"router down", tokens, p->r, p->d},
        {"router fc", tokens, p->r, p->r},
        {"router out", tokens, p->e + 1, p->r},
        {"expert gate_up", per_expert, 2 * p->f, p->d},
        {"expert down", per_expert, p->d, p->f},
        {"lm_head", tokens, p->v, p->d},
    };
    int n = 0;
    for (size_t i = 0; i < sizeof lin / sizeof lin[0]; i++) {
        char label[64];
        if (n + 3 > max) return zy_fail("preset %s: more than %d shapes", preset, max);
        snprintf(label, sizeof label, "%s fwd", lin[i].name);
        out[n++] = mk(lin[i].m, lin[i].n, lin[i].k, GEMM_XWT, preset, label);
        snprintf(label, sizeof label, "%s bwd-data", lin[i].name); /* dX = dY W */
        out[n++] = mk(lin[i].m, lin[i].k, lin[i].n, GEMM_XW, preset, label);
        snprintf(label, sizeof label, "%s bwd-weight", lin[i].name); /* dW = dY^T X */
        out[n++] = mk(lin[i].n, lin[i].k, lin[i].m, GEMM_XTW, preset, label);
    }
    return n;
}

int bench_gemm_parse_shape(const char *s, bench_gemm_shape *out) {
    long long m, n, k;
    int used = 0;
    if (sscanf(s, "%lldx%lldx%lld%n", &m, &n, &k, &used) != 3 || m < 1 || n < 1 || k < 1 ||
        m > (1 << 24) || n > (1 << 24) || k > (1 << 24))
        return zy_fail("shape '%s': expected MxNxK with positive sizes (up to 16777216), "
                       "optionally :xwt, :xw or :xtw",
                       s);
    bench_gemm_layout l = GEMM_XWT;
    const char *rest = s + used;
    if (*rest == ':') {
        rest++;
        if (!strcmp(rest, "xwt"))
            l = GEMM_XWT;
        else if (!strcmp(rest, "xw"))
            l = GEMM_XW;
        else if (!strcmp(rest, "xtw"))
            l = GEMM_XTW;
        else
            return zy_fail("shape '%s': layout '%s' is not xwt, xw or xtw", s, rest);
    } else if (*rest) {
        return zy_fail("shape '%s': unexpected '%s'", s, rest);
    }
    *out = mk((int)m, (int)n, (int)k, l, "custom", s);
    return ZY_OK;
}

int bench_gemm_sweep(const bench_gemm_opts *o, bench_dtype t, bench_gemm_shape **out, int *n) {
    if (o->shapes) {
        bench_gemm_shape *v = zy_malloc(sizeof(bench_gemm_shape) * (size_t)(o->nshapes + 1));
        memcpy(v, o->shapes, sizeof(bench_gemm_shape) * (size_t)o->nshapes);
        *out = v, *n = o->nshapes;
        return ZY_OK;
    }
    int cap = NSQUARE + 2 + NGRID * NGRID + 3 * NBASE * NOFF + 8 * 24 * 3;
    bench_gemm_shape *v = zy_malloc(sizeof(bench_gemm_shape) * (size_t)cap);
    int k = 0;
    char label[64];
    for (int i = 0; i < NSQUARE; i++) {
        if (t == BENCH_FP32 && square_sizes[i] > 8192) continue; /* minutes, and says nothing new */
        snprintf(label, sizeof label, "%d^3", square_sizes[i]);
        v[k++] = mk(square_sizes[i], square_sizes[i], square_sizes[i], GEMM_XWT, "square", label);
    }
    if (t == BENCH_FP32) {
        *out = v, *n = k;
        return ZY_OK;
    }
    for (int i = NSQUARE - 2; i < NSQUARE; i++) { /* the largest squares in the other layout too */
        snprintf(label, sizeof label, "%d^3 XW", square_sizes[i]);
        v[k++] = mk(square_sizes[i], square_sizes[i], square_sizes[i], GEMM_XW, "square", label);
    }
    if (!o->quick) {
        for (int i = 0; i < NGRID; i++)
            for (int j = 0; j < NGRID; j++) {
                snprintf(label, sizeof label, "%dx%d K=%d", grid_sizes[i], grid_sizes[j], GRID_K);
                v[k++] = mk(grid_sizes[i], grid_sizes[j], GRID_K, GEMM_XWT, "grid", label);
            }
        const char dims[3] = {'M', 'N', 'K'};
        for (int b = 0; b < NBASE; b++)
            for (int d = 0; d < 3; d++)
                for (int j = 0; j < NOFF; j++) {
                    int w = align_bases[b] + align_offsets[j];
                    int m = dims[d] == 'M' ? w : 8192, nn = dims[d] == 'N' ? w : 4096,
                        kk = dims[d] == 'K' ? w : 4096;
                    if (dims[d] == 'M') nn = 4096;
                    snprintf(label, sizeof label, "%c %d%+d", dims[d], align_bases[b],
                             align_offsets[j]);
                    bench_gemm_shape s = mk(m, nn, kk, GEMM_XWT, "align", label);
                    s.base = align_bases[b], s.offset = align_offsets[j], s.dim = dims[d];
                    v[k++] = s;
                }
    }
    char buf[128];
    snprintf(buf, sizeof buf, "%s", o->presets);
    char *names[8];
    int nn = 0;
    if (bench_split_list(buf, names, 8, &nn) != ZY_OK) {
        free(v);
        return ZY_ERR;
    }
    for (int i = 0; i < nn; i++) {
        int got = bench_gemm_preset_shapes(names[i], o->tokens, v + k, cap - k);
        if (got < 0) {
            free(v);
            return ZY_ERR;
        }
        k += got;
    }
    *out = v, *n = k;
    return ZY_OK;
}

double bench_gemm_flops(const bench_gemm_shape *s) {
    return 2.0 * s->m * (double)s->n * s->k;
}

void bench_gemm_quant(int m, int n, int tm, int tn, int splitk, int sms, int *tiles, double *waves,
                      double *wave_eff, double *tile_eff) {
    if (tm < 1 || tn < 1 || sms < 1) {
        *tiles = 0, *waves = 0, *wave_eff = 0, *tile_eff = 0;
        return;
    }
    long long tx = (m + tm - 1) / tm, ty = (n + tn - 1) / tn;
    long long t = tx * ty * (splitk > 1 ? splitk : 1);
    *tiles = (int)t;
    *waves = (double)t / sms;
    *wave_eff = (double)t / ((double)((t + sms - 1) / sms) * sms);
    *tile_eff = ((double)m * n) / ((double)tx * tm * ty * tn);
}

int bench_gemm_misaligned(const bench_gemm_shape *s, size_t elt) {
    /* Leading dimensions of the row-major operands (see bench_gemm_layout). */
    long long lx = s->layout == GEMM_XTW ? s->m : s->k;
    long long lw = s->layout == GEMM_XWT ? s->k : s->n;
    long long ly = s->n;
    return (lx * (long long)elt) % 16 != 0 || (lw * (long long)elt) % 16 != 0 ||
           (ly * (long long)elt) % 16 != 0;
}

void bench_gemm_finish(bench_gemm_result *r) {
    for (int t = 0; t < 3; t++) r->peak[t] = 0;
    for (int i = 0; i < r->nrows; i++)
        if (r->rows[i].tflops > r->peak[r->rows[i].dtype])
            r->peak[r->rows[i].dtype] = r->rows[i].tflops;
    for (int i = 0; i < r->nrows; i++) {
        double p = r->peak[r->rows[i].dtype];
        r->rows[i].frac_peak = p > 0 ? r->rows[i].tflops / p : 0;
    }
}

void bench_gemm_print_header(FILE *f) {
    fprintf(f, "%-5s %-5s %7s %7s %7s %-12s %-24s %10s %8s %6s %8s %6s %5s %5s %6s\n", "type", "op",
            "M", "N", "K", "group", "shape", "time(us)", "TFLOP/s", "%peak", "tile", "tiles",
            "waves", "q-eff", "check");
}

void bench_gemm_print_row(FILE *f, const bench_gemm_row *r) {
    char tile[16] = "?";
    if (r->tile_m > 0) snprintf(tile, sizeof tile, "%dx%d", r->tile_m, r->tile_n);
    char chk[16] = "-";
    if (r->check_bad == 0)
        snprintf(chk, sizeof chk, "ok");
    else if (r->check_bad > 0)
        snprintf(chk, sizeof chk, "BAD%d", r->check_bad);
    fprintf(f, "%-5s %-5s %7d %7d %7d %-12s %-24s %10.1f %8.1f %5.0f%% %8s %6d %5.2f %5.2f %6s\n",
            bench_dtype_name(r->dtype), bench_gemm_layout_name(r->s.layout), r->s.m, r->s.n, r->s.k,
            r->s.group, r->s.label, r->time_us, r->tflops, 100 * r->frac_peak, tile, r->tiles,
            r->waves, r->wave_eff * r->tile_eff, chk);
    fflush(f);
}

static const bench_gemm_row *find(const bench_gemm_result *r, bench_dtype t, const char *group,
                                  int m, int n, int k, bench_gemm_layout l) {
    for (int i = 0; i < r->nrows; i++) {
        const bench_gemm_row *w = &r->rows[i];
        if (w->dtype == t && w->s.m == m && w->s.n == n && w->s.k == k && w->s.layout == l &&
            !strcmp(w->s.group, group))
            return w;
    }
    return NULL;
}

/* Why a row runs slower than its reference row: alignment, quantisation or size. */
static void explain(char *buf, size_t n, const bench_gemm_row *w, const bench_gemm_row *ref,
                    int sms) {
    double q = w->wave_eff * w->tile_eff, qr = ref ? ref->wave_eff * ref->tile_eff : 1;
    if (w->misaligned) {
        snprintf(buf, n,
                 "a leading dimension is not a multiple of 16 bytes, so cuBLASLt cannot "
                 "use its 16-byte-aligned (TMA) kernels");
    } else if (w->tile_m > 0 && q < 0.85 * qr) {
        snprintf(buf, n,
                 "quantisation: %d tiles of %dx%d (%.0f%% of the padded area used) = "
                 "%.2f waves on %d SMs (last wave %.0f%% full)",
                 w->tiles, w->tile_m, w->tile_n, 100 * w->tile_eff, w->waves, sms,
                 100 * (w->waves - floor(w->waves - 1e-9)));
    } else if (bench_gemm_flops(&w->s) < 2e10) {
        snprintf(buf, n, "too little work to fill %d SMs (%.1f GFLOP)", sms,
                 bench_gemm_flops(&w->s) / 1e9);
    } else if (w->tile_m > 0) {
        snprintf(buf, n, "kernel choice (tile %dx%d, %d tiles, %.2f waves)", w->tile_m, w->tile_n,
                 w->tiles, w->waves);
    } else {
        snprintf(buf, n, "kernel choice");
    }
}

static void observe_dtype(FILE *f, const bench_gemm_result *r, bench_dtype t) {
    int sms = r->machine.sm_count > 0 ? r->machine.sm_count : 132;
    double peak = r->peak[t];
    const bench_gemm_row *best = NULL;
    for (int i = 0; i < r->nrows; i++)
        if (r->rows[i].dtype == t && (!best || r->rows[i].tflops > best->tflops))
            best = &r->rows[i];
    if (!best) return;
    fprintf(f, "\n%s: measured peak %.1f TFLOP/s at M=%d N=%d K=%d (%s, %s)\n", bench_dtype_name(t),
            peak, best->s.m, best->s.n, best->s.k, bench_gemm_layout_name(best->s.layout),
            best->s.label);
    /* How large a square must be. */
    int first90 = 0, nsq = 0;
    for (int i = 0; i < NSQUARE; i++) {
        int s = square_sizes[i];
        const bench_gemm_row *w = find(r, t, "square", s, s, s, GEMM_XWT);
        if (!w) continue;
        fprintf(f, nsq++ ? " %d: %.0f%%" : "  squares (XW^T): %d: %.0f%%", s, 100 * w->frac_peak);
        if (!first90 && w->frac_peak >= 0.9) first90 = s;
    }
    if (nsq) {
        fputc('\n', f);
        if (first90)
            fprintf(f, "  near peak (>= 90%%) from M=N=K=%d; below that the GPU is not filled\n",
                    first90);
        else
            fprintf(f, "  no square of the sweep reaches 90%% of the peak\n");
    }
    /* The grid: the cheapest shape that reaches 90%. */
    const bench_gemm_row *cheap = NULL;
    for (int i = 0; i < r->nrows; i++) {
        const bench_gemm_row *w = &r->rows[i];
        if (w->dtype != t || strcmp(w->s.group, "grid") != 0 || w->frac_peak < 0.9) continue;
        if (!cheap || bench_gemm_flops(&w->s) < bench_gemm_flops(&cheap->s)) cheap = w;
    }
    if (cheap)
        fprintf(f, "  with K=%d the smallest M x N reaching 90%% is %d x %d (%.0f GFLOP)\n", GRID_K,
                cheap->s.m, cheap->s.n, bench_gemm_flops(&cheap->s) / 1e9);
    /* Alignment: each offset against the aligned base of its family. */
    int lossy[NOFF] = {0}, seen[NOFF] = {0};
    for (int b = 0; b < NBASE; b++)
        for (int d = 0; d < 3; d++) {
            char dim = "MNK"[d];
            const bench_gemm_row *base = NULL;
            for (int i = 0; i < r->nrows; i++) {
                const bench_gemm_row *w = &r->rows[i];
                if (w->dtype == t && !strcmp(w->s.group, "align") && w->s.dim == dim &&
                    w->s.base == align_bases[b] && w->s.offset == 0)
                    base = w;
            }
            if (!base) continue;
            for (int i = 0; i < r->nrows; i++) {
                const bench_gemm_row *w = &r->rows[i];
                if (w->dtype != t || strcmp(w->s.group, "align") != 0 || w->s.dim != dim ||
                    w->s.base != align_bases[b] || w->s.offset == 0)
                    continue;
                int j = 0;
                while (j < NOFF && align_offsets[j] != w->s.offset) j++;
                if (j < NOFF) seen[j] = 1;
                double rel = base->tflops > 0 ? w->tflops / base->tflops : 0;
                if (rel >= 0.9) continue;
                if (j < NOFF) lossy[j] = 1;
                char why[256];
                explain(why, sizeof why, w, base, sms);
                fprintf(f, "  %c = %d (%d%+d): %.0f TFLOP/s, %.0f%% of %c = %d: %s\n", dim,
                        align_bases[b] + w->s.offset, align_bases[b], w->s.offset, w->tflops,
                        100 * rel, dim, align_bases[b], why);
            }
        }
    int any = 0;
    for (int j = 0; j < NOFF; j++) any |= seen[j];
    if (any) {
        fprintf(f, "  offsets from an aligned width:");
        for (int j = 0; j < NOFF; j++)
            if (seen[j]) fprintf(f, " %+d %s", align_offsets[j], lossy[j] ? "LOSES" : "ok");
        fprintf(f, "  (LOSES: >= 10%% below the aligned width in some M/N/K family above)\n");
    }
    /* The model presets: time-weighted efficiency and the slow GEMMs. */
    for (size_t p = 0; p < sizeof presets / sizeof presets[0]; p++) {
        double fl = 0, tm = 0;
        int n = 0;
        for (int i = 0; i < r->nrows; i++) {
            const bench_gemm_row *w = &r->rows[i];
            if (w->dtype != t || strcmp(w->s.group, presets[p].name) != 0) continue;
            fl += bench_gemm_flops(&w->s);
            tm += w->time_us * 1e-6;
            n++;
        }
        if (!n || tm <= 0) continue;
        fprintf(f, "  %s (one layer + lm head, fwd+bwd): %.0f TFLOP/s overall = %.0f%% of peak\n",
                presets[p].name, fl / tm / 1e12, 100 * fl / tm / 1e12 / peak);
        for (int i = 0; i < r->nrows; i++) {
            const bench_gemm_row *w = &r->rows[i];
            if (w->dtype != t || strcmp(w->s.group, presets[p].name) != 0 || w->frac_peak >= 0.7)
                continue;
            char why[256];
            explain(why, sizeof why, w, NULL, sms);
            fprintf(f, "    %-24s M=%-6d N=%-6d K=%-6d %5.0f%% of peak: %s\n", w->s.label, w->s.m,
                    w->s.n, w->s.k, 100 * w->frac_peak, why);
        }
    }
}

void bench_gemm_observations(FILE *f, const bench_gemm_result *r) {
    fprintf(f, "\n# observations (%d SMs)\n", r->machine.sm_count);
    for (int t = 0; t < 3; t++) observe_dtype(f, r, (bench_dtype)t);
}

cJSON *bench_gemm_to_json(const bench_gemm_result *r) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "bench", "gemm");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddItemToObject(root, "machine", bench_machine_to_json(&r->machine));
    cJSON_AddStringToObject(root, "library", "cuBLASLt (heuristic's best candidate)");
    cJSON *pk = cJSON_AddObjectToObject(root, "peak_tflops");
    for (int t = 0; t < 3; t++)
        if (r->peak[t] > 0)
            cJSON_AddNumberToObject(pk, bench_dtype_name((bench_dtype)t), r->peak[t]);
    cJSON *rows = cJSON_AddArrayToObject(root, "rows");
    for (int i = 0; i < r->nrows; i++) {
        const bench_gemm_row *w = &r->rows[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "dtype", bench_dtype_name(w->dtype));
        cJSON_AddStringToObject(o, "layout", bench_gemm_layout_name(w->s.layout));
        cJSON_AddNumberToObject(o, "M", w->s.m);
        cJSON_AddNumberToObject(o, "N", w->s.n);
        cJSON_AddNumberToObject(o, "K", w->s.k);
        cJSON_AddStringToObject(o, "group", w->s.group);
        cJSON_AddStringToObject(o, "label", w->s.label);
        cJSON_AddNumberToObject(o, "time_us", w->time_us);
        cJSON_AddNumberToObject(o, "tflops", w->tflops);
        cJSON_AddNumberToObject(o, "frac_peak", w->frac_peak);
        cJSON_AddNumberToObject(o, "tile_m", w->tile_m);
        cJSON_AddNumberToObject(o, "tile_n", w->tile_n);
        cJSON_AddNumberToObject(o, "tile_id", w->tile_id);
        cJSON_AddNumberToObject(o, "splitk", w->splitk);
        cJSON_AddNumberToObject(o, "tiles", w->tiles);
        cJSON_AddNumberToObject(o, "waves", w->waves);
        cJSON_AddNumberToObject(o, "wave_eff", w->wave_eff);
        cJSON_AddNumberToObject(o, "tile_eff", w->tile_eff);
        cJSON_AddBoolToObject(o, "misaligned", w->misaligned);
        cJSON_AddNumberToObject(o, "check_bad", w->check_bad);
        cJSON_AddNumberToObject(o, "check_err_over_tol", w->check_err);
        cJSON_AddItemToArray(rows, o);
    }
    return root;
}

void bench_gemm_grid(const bench_gemm_result *r, bench_dtype t, double *values, int *ms, int *ns,
                     int *rows, int *cols) {
    for (int i = 0; i < NGRID; i++) {
        ms[i] = ns[i] = grid_sizes[i];
        for (int j = 0; j < NGRID; j++) {
            const bench_gemm_row *w =
                find(r, t, "grid", grid_sizes[i], grid_sizes[j], GRID_K, GEMM_XWT);
            values[i * NGRID + j] = w ? w->tflops : NAN;
        }
    }
    *rows = *cols = NGRID;
}

int bench_gemm_plot(const char *dir, const bench_gemm_result *r) {
    char path[4096], name[64], title[128];
    for (int t = 0; t < 3; t++) {
        double v[64];
        int ms[8], ns[8], rows, cols, any = 0;
        bench_gemm_grid(r, (bench_dtype)t, v, ms, ns, &rows, &cols);
        for (int i = 0; i < rows * cols; i++) any |= !isnan(v[i]);
        if (any) {
            char lab[2][8][16];
            const char *rl[8], *cl[8];
            for (int i = 0; i < rows; i++) {
                snprintf(lab[0][i], 16, "%d", ms[i]);
                rl[i] = lab[0][i];
            }
            for (int j = 0; j < cols; j++) {
                snprintf(lab[1][j], 16, "%d", ns[j]);
                cl[j] = lab[1][j];
            }
            snprintf(name, sizeof name, "gemm_grid_%s.png", bench_dtype_name((bench_dtype)t));
            ZY_TRY(bench_out_path(path, sizeof path, dir, name));
            snprintf(title, sizeof title, "%s TFLOP/s, Y = X W^T, K = %d",
                     bench_dtype_name((bench_dtype)t), GRID_K);
            ZY_TRY(plot_heatmap_png(path, title, "N", "M", v, rows, cols, rl, cl));
        }
        /* Alignment: rows (dim, base), columns offsets. */
        double a[3 * NBASE * NOFF];
        char rlab[3 * NBASE][16], clab[NOFF][16];
        const char *rl[3 * NBASE], *cl[NOFF];
        any = 0;
        for (int b = 0; b < NBASE; b++)
            for (int d = 0; d < 3; d++) {
                int row = b * 3 + d;
                snprintf(rlab[row], 16, "%c %d", "MNK"[d], align_bases[b]);
                rl[row] = rlab[row];
                for (int j = 0; j < NOFF; j++) {
                    a[row * NOFF + j] = NAN;
                    for (int i = 0; i < r->nrows; i++) {
                        const bench_gemm_row *w = &r->rows[i];
                        if (w->dtype == (bench_dtype)t && !strcmp(w->s.group, "align") &&
                            w->s.dim == "MNK"[d] && w->s.base == align_bases[b] &&
                            w->s.offset == align_offsets[j]) {
                            a[row * NOFF + j] = w->tflops;
                            any = 1;
                        }
                    }
                }
            }
        for (int j = 0; j < NOFF; j++) {
            snprintf(clab[j], 16, "%+d", align_offsets[j]);
            cl[j] = clab[j];
        }
        if (any) {
            snprintf(name, sizeof name, "gemm_align_%s.png", bench_dtype_name((bench_dtype)t));
            ZY_TRY(bench_out_path(path, sizeof path, dir, name));
            snprintf(title, sizeof title, "%s TFLOP/s by width offset (others 8192/4096)",
                     bench_dtype_name((bench_dtype)t));
            ZY_TRY(plot_heatmap_png(path, title, "offset from the base width", "varied dim, base",
                                    a, 3 * NBASE, NOFF, rl, cl));
        }
    }
    /* Squares: TFLOP/s against size, one line per dtype. */
    zy_series s[3];
    double xs[3][NSQUARE], ys[3][NSQUARE];
    int ns = 0;
    for (int t = 0; t < 3; t++) {
        int n = 0;
        for (int i = 0; i < NSQUARE; i++) {
            int q = square_sizes[i];
            const bench_gemm_row *w = find(r, (bench_dtype)t, "square", q, q, q, GEMM_XWT);
            if (!w) continue;
            xs[ns][n] = q;
            ys[ns][n] = w->tflops;
            n++;
        }
        if (!n) continue;
        s[ns].label = bench_dtype_name((bench_dtype)t);
        s[ns].x = xs[ns];
        s[ns].y = ys[ns];
        s[ns].n = n;
        ns++;
    }
    if (ns) {
        ZY_TRY(bench_out_path(path, sizeof path, dir, "gemm_square.png"));
        zy_plot_opts po = {"cuBLASLt square GEMM (Y = X W^T)", "M = N = K", "TFLOP/s", 2, 0, 0, 0};
        ZY_TRY(plot_lines_png(path, &po, s, ns));
    }
    return ZY_OK;
}

int bench_gemm_write(const char *dir, const bench_gemm_result *r) {
    char path[4096];
    ZY_TRY(bench_out_path(path, sizeof path, dir, "gemm.json"));
    cJSON *root = bench_gemm_to_json(r);
    int rc = bench_write_json(path, root);
    cJSON_Delete(root);
    return rc;
}
