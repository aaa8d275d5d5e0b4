/* Shared pieces of the benchmarks: data types, byte sizes ("4G"), size sweeps, the machine
 * description stamped into every result file, and JSON file writing. */
#ifndef ZY_BENCH_UTIL_H
#define ZY_BENCH_UTIL_H

#include <stddef.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct cJSON cJSON;

/* Element types. TF32 is fp32 storage with tf32 tensor-core arithmetic (GEMM only). */
typedef enum { BENCH_BF16 = 0, BENCH_FP32 = 1, BENCH_TF32 = 2 } bench_dtype;

const char *bench_dtype_name(bench_dtype t);
/* "bf16", "fp32" / "float", "tf32"; an unknown name is an error listing the known ones. */
int bench_dtype_parse(const char *s, bench_dtype *t);
/* Bytes per element (2 or 4). */
size_t bench_dtype_size(bench_dtype t);

/* Parses "8", "64K", "4M", "4G" (K = 1024, as nccl-tests), optionally with a trailing "B". */
int bench_parse_bytes(const char *s, size_t *out);
/* Writes b as "8B", "64K", "4M", "4G" when exact, else plain bytes. */
void bench_format_bytes(size_t b, char *buf, size_t n);
/* Sizes min, min*f, ... up to max (inclusive), as nccl-tests steps -b/-e/-f. Heap array. */
int bench_sizes(size_t min, size_t max, size_t factor, size_t **out, int *n);

/* Splits a comma-separated list into at most max heap-free views: items[i] point into buf. */
int bench_split_list(char *buf, char **items, int max, int *n);

typedef struct {
    char hostname[128];
    char date[32]; /* UTC, ISO 8601 */
    char gpu[256]; /* device name */
    int gpus;      /* devices visible to this process */
    int sm_count;  /* multiprocessors */
    int cc;        /* compute capability, e.g. 90 */
    long long l2_bytes;
    long long mem_bytes;
    int clock_khz; /* SM clock reported by the device */
    int driver;    /* CUDA driver version, e.g. 13000 */
    int runtime;   /* CUDA runtime version */
    int nccl;      /* NCCL version code, 0 if unused */
    int cublaslt;  /* cuBLASLt version, 0 if unused */
} bench_machine;

/* Fills hostname and date (no GPU needed). */
void bench_machine_host(bench_machine *m);
cJSON *bench_machine_to_json(const bench_machine *m);
/* Reads the machine object of a result file (missing fields stay empty). */
void bench_machine_from_json(const cJSON *o, bench_machine *m);
/* Prints one line describing the machine. */
void bench_machine_print(FILE *f, const bench_machine *m);

/* Writes root as formatted JSON to path atomically (path's directory is created). */
int bench_write_json(const char *path, const cJSON *root);
/* Reads and parses a JSON file; errors name the file. */
int bench_read_json(const char *path, cJSON **out);
/* Creates dir and joins dir/name into buf. */
int bench_out_path(char *buf, size_t n, const char *dir, const char *name);

/* GPU queries (src/bench/gpu.cu; stubs without CUDA). */
/* Number of usable CUDA devices; 0 devices or no driver is an error saying so in one line. */
int bench_gpu_count(int *n);
/* Fills the GPU fields of m for device dev. */
int bench_gpu_describe(bench_machine *m, int dev);

#ifdef __cplusplus
}
#endif

#endif
