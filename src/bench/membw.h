/* Memory bandwidth benchmark: device copy / scale / triad kernels (16-byte accesses), the CUDA
 * runtime's device-to-device copy, and host<->device copies from pageable and pinned memory, over
 * sizes from cache-resident to several GB. Bandwidth counts every byte read plus every byte
 * written (GB = 1e9). This file owns the definitions, table, JSON and plots; membw_run.cu runs. */
#ifndef ZY_BENCH_MEMBW_H
#define ZY_BENCH_MEMBW_H

#include "bench/util.h"

#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum {
    MEMBW_COPY = 0,     /* b = a */
    MEMBW_SCALE,        /* b = s * a */
    MEMBW_TRIAD,        /* a = b + s * c */
    MEMBW_MEMCPY,       /* cudaMemcpyAsync device to device */
    MEMBW_H2D_PAGEABLE, /* cudaMemcpyAsync from malloc'd memory */
    MEMBW_D2H_PAGEABLE,
    MEMBW_H2D_PINNED, /* from cudaMallocHost memory */
    MEMBW_D2H_PINNED,
    MEMBW_NKINDS
} bench_membw_kind;

const char *bench_membw_name(bench_membw_kind k);
int bench_membw_is_host(bench_membw_kind k);
/* Bytes a run moves for arrays of `bytes` each: 2x copy/scale/memcpy, 3x triad, 1x host copies. */
double bench_membw_moved(bench_membw_kind k, size_t bytes);

typedef struct {
    size_t min_bytes, max_bytes; /* device array sizes (each array) */
    size_t host_min_bytes, host_max_bytes;
    double target_ms; /* timed run length per point */
    const char *out_dir;
} bench_membw_opts;

void bench_membw_opts_default(bench_membw_opts *o);

typedef struct {
    bench_membw_kind kind;
    size_t bytes;   /* per array */
    double time_us; /* per run */
    double gbps;    /* moved bytes / time, GB = 1e9 */
    int64_t wrong;  /* elements that differ from the expected result; -1 = not checked */
    int variant;    /* fastest kernel variant: bit 0 streaming accesses, bit 1 persistent grid */
} bench_membw_row;

typedef struct {
    bench_machine machine;
    bench_membw_row *rows;
    int nrows, cap;
} bench_membw_result;

void bench_membw_result_init(bench_membw_result *r);
void bench_membw_result_free(bench_membw_result *r);
void bench_membw_result_add(bench_membw_result *r, const bench_membw_row *row);
void bench_membw_print(FILE *f, const bench_membw_result *r);
cJSON *bench_membw_to_json(const bench_membw_result *r);
/* Writes DIR/membw.json. */
int bench_membw_write(const char *dir, const bench_membw_result *r);
/* Writes DIR/membw_device.png and DIR/membw_host.png (GB/s against array size, a line per kind). */
int bench_membw_plot(const char *dir, const bench_membw_result *r);

/* GPU side (membw_run.cu). */
int bench_membw_run(const bench_membw_opts *o, int dev, bench_membw_result *res, FILE *out);

#ifdef __cplusplus
}
#endif

#endif
