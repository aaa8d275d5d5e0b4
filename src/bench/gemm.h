/* GEMM benchmark: cuBLASLt throughput by shape, for sizing a model to the GPU. The sweep holds
 * squares (how large a GEMM must be to reach near peak), an M x N grid, widths around 1024 and
 * 4096 with alignment offsets (-64, -1, +1, +8, +64, +128, +256) and every GEMM of the model
 * presets' training step (forward, backward-data, backward-weight). This file owns the shapes,
 * the quantisation model, the observations, the result file and the heatmaps; gemm_run.cu runs. */
#ifndef ZY_BENCH_GEMM_H
#define ZY_BENCH_GEMM_H

#include "bench/util.h"

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Row-major operands; Y is [M, N]:
 *   XWT: Y = X W^T, X [M, K], W [N, K]  (a linear layer's forward)
 *   XW:  Y = X W,   X [M, K], W [K, N]  (backward to the input: dX = dY W)
 *   XTW: Y = X^T W, X [K, M], W [K, N]  (backward to the weight: dW = dY^T X) */
typedef enum { GEMM_XWT = 0, GEMM_XW = 1, GEMM_XTW = 2 } bench_gemm_layout;

const char *bench_gemm_layout_name(bench_gemm_layout l);

typedef struct {
    int m, n, k;
    bench_gemm_layout layout;
    char group[24]; /* "square", "grid", "align", or a preset name */
    char label[64]; /* what this GEMM is ("lm_head fwd", "N 4096+1") */
    int base;       /* align group: the width the offset applies to; else 0 */
    int offset;     /* align group: the offset */
    char dim;       /* align group: 'M', 'N' or 'K' */
} bench_gemm_shape;

typedef struct {
    bench_dtype dtypes[3];
    int ndtypes;
    int tokens;                     /* tokens per step for the preset shapes (16384) */
    char presets[128];              /* comma-separated: bench-small, bench-base, zaya1-base */
    double target_ms;               /* timed run length per shape */
    double warmup_ms;               /* sustained load before timing each shape */
    int algos;                      /* cuBLASLt heuristic candidates tried per shape (best kept) */
    int check;                      /* compare sampled outputs with a float64 reference */
    size_t workspace;               /* cuBLASLt workspace bytes */
    int quick;                      /* squares and presets only */
    const bench_gemm_shape *shapes; /* when set: exactly these shapes instead of the sweep */
    int nshapes;
    const char *out_dir;
} bench_gemm_opts;

void bench_gemm_opts_default(bench_gemm_opts *o);

typedef struct {
    bench_gemm_shape s;
    bench_dtype dtype;
    double time_us;
    double tflops;
    double frac_peak;    /* of this dtype's best rate in the run */
    int tile_m, tile_n;  /* output tile over M and N of the kernel cuBLASLt chose; 0 unknown */
    int tile_id, splitk; /* cuBLASLt's tile enum and split-K count */
    int tiles;           /* output tiles (times split-K) */
    double waves;        /* tiles / SMs */
    double wave_eff;     /* tiles / (ceil(waves) * SMs) */
    double tile_eff;     /* M*N / (tiles' padded area) */
    int misaligned;      /* some leading dimension is not a multiple of 16 bytes */
    int check_bad;       /* sampled outputs outside tolerance; -1 = not checked */
    double check_err;    /* largest error / tolerance among the samples */
} bench_gemm_row;

typedef struct {
    bench_machine machine;
    bench_gemm_row *rows;
    int nrows, cap;
    double peak[3]; /* best TFLOP/s per dtype */
} bench_gemm_result;

void bench_gemm_result_init(bench_gemm_result *r);
void bench_gemm_result_free(bench_gemm_result *r);
void bench_gemm_result_add(bench_gemm_result *r, const bench_gemm_row *row);

/* The GEMMs of one training step of a preset ("bench-small", "zaya1-base") at `tokens` tokens:
 * per layer qkv, o_proj, router down/fc1/fc2/out, expert gate_up/down (tokens / E rows each),
 * and the lm head, each forward, backward-data and backward-weight. Returns the count written
 * (at most max) or ZY_ERR for an unknown preset. */
int bench_gemm_preset_shapes(const char *preset, int tokens, bench_gemm_shape *out, int max);
/* The whole sweep for one dtype (fp32 without tensor cores gets the squares only), or a copy of
 * o->shapes when set. */
int bench_gemm_sweep(const bench_gemm_opts *o, bench_dtype t, bench_gemm_shape **out, int *n);
/* Parses "MxNxK" or "MxNxK:layout" (layout xwt, xw or xtw; default xwt). */
int bench_gemm_parse_shape(const char *s, bench_gemm_shape *out);
/* 2*M*N*K. */
double bench_gemm_flops(const bench_gemm_shape *s);
/* Tile and wave quantisation of an M x N output cut into tm x tn tiles (times splitk) on sms
 * multiprocessors. */
void bench_gemm_quant(int m, int n, int tm, int tn, int splitk, int sms, int *tiles, double *waves,
                      double *wave_eff, double *tile_eff);
/* 1 when a leading dimension of the layout is not a multiple of 16 bytes. */
int bench_gemm_misaligned(const bench_gemm_shape *s, size_t elt);
/* Fills peak[] and each row's frac_peak. */
void bench_gemm_finish(bench_gemm_result *r);
/* Prints the table (one line per row). */
void bench_gemm_print_row(FILE *f, const bench_gemm_row *r);
void bench_gemm_print_header(FILE *f);
/* Prints what a model designer needs: the peak, the size that reaches 90% of it, the widths that
 * lose throughput and why (tile/wave quantisation, alignment), the slow model GEMMs. */
void bench_gemm_observations(FILE *f, const bench_gemm_result *r);

cJSON *bench_gemm_to_json(const bench_gemm_result *r);
/* Writes DIR/gemm.json. */
int bench_gemm_write(const char *dir, const bench_gemm_result *r);
/* Writes the heatmaps DIR/gemm_grid_<dtype>.png and gemm_align_<dtype>.png and the line chart
 * DIR/gemm_square.png. */
int bench_gemm_plot(const char *dir, const bench_gemm_result *r);
/* The grid heatmap's values for a dtype: rows M, columns N (the sweep's grid sizes); NaN where a
 * shape is missing. Sets *rows and *cols (at most 8 each). */
void bench_gemm_grid(const bench_gemm_result *r, bench_dtype t, double *values, int *ms, int *ns,
                     int *rows, int *cols);

/* GPU side (gemm_run.cu): runs every shape of the sweep on device dev, printing rows to out. */
int bench_gemm_run(const bench_gemm_opts *o, int dev, bench_gemm_result *res, FILE *out);

#ifdef __cplusplus
}
#endif

#endif
