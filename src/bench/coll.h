/* Collective benchmark (all-reduce, reduce-scatter, all-gather, broadcast, all-to-all through
 * NCCL): nccl-tests' size conventions and bandwidth definitions, the options, the result table,
 * JSON/CSV files and the bus-bandwidth plots. The GPU side is coll_run.cu. */
#ifndef ZY_BENCH_COLL_H
#define ZY_BENCH_COLL_H

#include "bench/util.h"
#include "base/plot.h"
#include "dist/rdv.h"
#include "dist/watchdog.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    COLL_ALL_REDUCE = 0,
    COLL_REDUCE_SCATTER,
    COLL_ALL_GATHER,
    COLL_BROADCAST,
    COLL_ALL_TO_ALL,
    COLL_NKINDS
} bench_coll_kind;

/* nccl-tests' names: "all_reduce", "reduce_scatter", "all_gather", "broadcast", "alltoall". */
const char *bench_coll_name(bench_coll_kind k);
/* Accepts those names and the spellings allreduce, all-reduce, ...; unknown is an error. */
int bench_coll_parse(const char *s, bench_coll_kind *k);
/* 1 for the reductions (sum), 0 for pure data movement. */
int bench_coll_reduces(bench_coll_kind k);
/* Bus factor: 2(n-1)/n all-reduce; (n-1)/n reduce-scatter, all-gather, all-to-all; 1 broadcast. */
double bench_coll_bus_factor(bench_coll_kind k, int n);

/* Element counts for a requested message of `bytes`, exactly as nccl-tests computes them: the
 * per-rank count is rounded down to 16 bytes' worth of elements for the collectives that split
 * the message over ranks. In-place offsets are per rank (multiply by the rank). */
typedef struct {
    size_t count;            /* the count passed to NCCL */
    size_t send_count;       /* elements each rank sends from */
    size_t recv_count;       /* elements each rank receives into */
    size_t send_inplace_off; /* in-place: send = recv buffer + rank * this (elements) */
    size_t recv_inplace_off; /* in-place: recv = send buffer + rank * this (elements) */
    size_t size_bytes;       /* the size nccl-tests prints: max(send, recv) * element size */
} bench_coll_counts;

void bench_coll_counts_for(bench_coll_kind k, size_t bytes, size_t elt, int n,
                           bench_coll_counts *c);
/* nccl-tests' algorithm and bus bandwidth (GB/s, GB = 1e9) of one operation taking sec. */
void bench_coll_bw(bench_coll_kind k, size_t count, size_t elt, double sec, int n, double *algbw,
                   double *busbw);

typedef struct {
    size_t min_bytes, max_bytes, factor; /* -b, -e, -f */
    int warmup, iters;                   /* -w, -n */
    bench_coll_kind colls[COLL_NKINDS];
    int ncolls;
    bench_dtype dtypes[2];
    int ndtypes;
    int placement;    /* 0 out-of-place, 1 in-place, 2 both */
    int check;        /* run the correctness check */
    int root;         /* broadcast root */
    double timeout_s; /* rendezvous and every wait */
    const char *out_dir;
    int corrupt;     /* self-test of the check: overwrite this many received elements before it */
    int nonblocking; /* create the NCCL communicator non-blocking (slower per call) */
    dist_stuck_fn on_stuck; /* called when a blocking NCCL call hangs (see dist/watchdog.h) */
    void *stuck_ctx;
} bench_coll_opts;

/* Fills the defaults: 8 B .. 128 MB by 2, 5 warm-up + 20 timed, all five, bf16, both, check. */
void bench_coll_opts_default(bench_coll_opts *o);

typedef struct {
    bench_coll_kind coll;
    bench_dtype dtype;
    int inplace;
    size_t size_bytes; /* nccl-tests' printed size */
    size_t count;      /* NCCL count */
    double time_us;    /* per operation, averaged over ranks */
    double algbw, busbw;
    int64_t wrong; /* wrong elements summed over ranks; -1 = not checked */
} bench_coll_row;

typedef struct {
    bench_machine machine;
    int nranks, nnodes;
    int warmup, iters;
    bench_coll_row *rows;
    int nrows, cap;
} bench_coll_result;

void bench_coll_result_init(bench_coll_result *r);
void bench_coll_result_free(bench_coll_result *r);
void bench_coll_result_add(bench_coll_result *r, const bench_coll_row *row);

/* The table: a header per (collective, type), one line per size with out-of-place and in-place
 * columns side by side like nccl-tests (either may be NULL). */
void bench_coll_print_header(FILE *f, bench_coll_kind k, bench_dtype t, int nranks);
void bench_coll_print_line(FILE *f, const bench_coll_row *out, const bench_coll_row *in);
/* Peak bus bandwidth per collective and type, and whether any element was wrong. */
void bench_coll_print_summary(FILE *f, const bench_coll_result *r);

cJSON *bench_coll_to_json(const bench_coll_result *r);
/* Reads a result file written by bench_coll_write; every field is checked, errors name the file. */
int bench_coll_read(const char *path, bench_coll_result *r);
/* Writes DIR/collectives_n<N>.json and .csv. */
int bench_coll_write(const char *dir, const bench_coll_result *r);
int bench_coll_write_csv(const char *path, const bench_coll_result *r);

/* One series per result of busbw against size for (coll, dtype, placement); points of size 0 are
 * left out. x/y storage is allocated per series (free with bench_coll_series_free). Returns the
 * number of series (results that have the collective). */
int bench_coll_series(const bench_coll_result *res, int nres, bench_coll_kind k, bench_dtype t,
                      int inplace, zy_series *out, char (*labels)[64]);
void bench_coll_series_free(zy_series *s, int n);
/* Writes DIR/busbw_<coll>_<dtype>.png for every collective and type present in the results,
 * one line per result (GPU count). */
int bench_coll_plot(const char *dir, const bench_coll_result *res, int nres);

/* GPU side (coll_run.cu). */
/* Runs the sweep as this rank of the job whose control channel is rdv, on CUDA
 * device `device`; rank 0 prints the table to out (others pass NULL) and every rank fills res.
 * on_size (may be NULL) is called before each size with its bytes (a test hook). */
int bench_coll_run(const bench_coll_opts *o, dist_rdv *rdv, int device, bench_coll_result *res,
                   FILE *out, void (*on_size)(size_t bytes, void *ctx), void *ctx);

#ifdef __cplusplus
}
#endif

#endif
