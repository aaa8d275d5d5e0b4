/* Whole-training-step benchmark (`zayac bench train`): builds a model from a config, trains it on
 * synthetic token ids for some steps with the training step itself (train/step.h: zero grads,
 * forward, backward, route counts, clipping, optimiser, balancing) and reports tokens/s, step time,
 * model TFLOP/s and MFU against the measured bf16 matmul peak, memory, and (with profiling) the
 * per-op time of one extra step. This file owns the options, the result, its table and its JSON. */
#ifndef ZY_BENCH_TRAIN_BENCH_H
#define ZY_BENCH_TRAIN_BENCH_H

#include "bench/util.h"
#include "model/model.h"
#include "train/step.h"

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef struct {
    zy_config model;      /* validated model config */
    char model_name[512]; /* preset name or config path, for the report */
    zy_device device;
    int gpu;           /* CUDA device index */
    zy_cuda_opts cuda; /* how the CUDA context runs the expert GEMMs (the cuda.* settings) */
    int threads;       /* CPU threads (0 = OpenMP's default) */
    int batch, seq;    /* B, T */
    int steps, warmup; /* timed steps, untimed steps before them */
    int use_muon;      /* 0: AdamW everywhere; 1: Muon for the matrices, AdamW for the rest */
    int ns_steps;      /* Muon's Newton-Schulz iterations (the optimizer.ns_steps setting) */
    int ns_coefs;      /* zy_ns_coefs: their coefficients (optimizer.ns_coefficients) */
    int ns_precond;    /* zy_ns_precond: the starting iterate (optimizer.ns_precondition) */
    int adam_moments;  /* zy_adam_moments: AdamW's moments' precision (optimizer.adam_moments) */
    int muon_momentum_dtype; /* the same for Muon's momentum (optimizer.muon_momentum_dtype) */
    float lr;                /* constant learning rate */
    int profile;             /* 1: one extra profiled step for the per-op breakdown */
    int recompute;           /* 1: activation recomputation (the `recompute` setting) */
    int embedding_update;    /* ranks: who updates the embedding, a zy_embedding_update (the
                                `dist.embedding_update` setting; default split) */
    double peak_tflops;      /* > 0: the peak to compute MFU against; 0: measure it (CUDA only) */
    uint64_t seed;           /* weights and synthetic data */
    FILE *progress;          /* progress lines (NULL: quiet) */
} bench_train_opts;

/* Batch 8 x 2048, 20 steps after 3 warm-up steps, AdamW at lr 3e-4, seed 1, no profiling, CPU;
 * model is zeroed (the caller fills it). */
void bench_train_opts_default(bench_train_opts *o);
/* Checks the options against each other and the model (sequence within max_position_embeddings,
 * positive sizes); the error names the option, the allowed range and the value. */
int bench_train_check(const bench_train_opts *o);

typedef struct {
    char op[48];        /* op name as the profiler records it */
    long calls;         /* calls in the profiled step */
    double ms_per_step; /* device time (CPU: wall time) in the profiled step */
    double pct;         /* of the profiled step's wall time */
} bench_train_op;

typedef struct {
    int world, rank;         /* data-parallel ranks (under zayac launch / mpirun), this one */
    int64_t tokens_per_step; /* B * T * world: --batch is per rank */
    double *step_ms;         /* [steps] each timed step */
    int nsteps;
    double step_ms_mean, step_ms_min, step_ms_max;
    double tokens_per_s;
    double flops_per_token; /* model_train_flops_per_token */
    double model_tflops;    /* flops_per_token * tokens_per_s / 1e12 */
    double peak_tflops;     /* NaN: unknown (CPU without --peak-tflops) */
    int peak_measured;      /* 1: measured here with a bf16 8192^3 GEMM; 0: given */
    double mfu;             /* model_tflops / peak_tflops; NaN when the peak is unknown */
    double mem_gib; /* CUDA: device memory this process added, after warm-up; CPU: peak RSS */
    double device_used_gib; /* CUDA: all used memory of the device after warm-up; NaN on the CPU */
    double params_bytes; /* the fp32 masters on the device (ZeRO-1 on GPUs: the largest rank's) */
    double grads_bytes;  /* from the structures (every rank holds them whole) */
    /* optimizer state (moments + Newton-Schulz workspace): the largest and smallest of one rank,
     * the sum over ranks (ZeRO-1: each rank holds its tensors' share) */
    double optim_bytes, optim_bytes_min, optim_bytes_all;
    double muon_gather_bytes; /* ranks, Muon: what all-gathering the fp32 gradients of the Muon
                                 matrices for Newton-Schulz would hold on every rank (the scheme
                                 zayac does not need: each matrix is whole on its owner) */
    double *optim_ms_rank; /* [world] the optimizer phase of each rank's profiled step, or NULL */
    double acts_bytes;     /* CUDA: measured around acts_init; NaN on the CPU (not recorded) */
    double acts_estimate;  /* the activation arena's bytes as the memory estimate has them */
    double workspace_estimate; /* attention's backward workspace at most, as the estimate has it */
    zy_param_counts counts;    /* model_count_params */
    double loss_first, loss_last; /* mean token loss of the first warm-up/timed and last step */
    int nonfinite_steps;          /* steps whose loss or gradient norm was not finite */
    /* expert load over the timed steps: per layer and step, the busiest expert's routed rows over
     * the mean of the experts' (1 = perfectly balanced); the mean and the largest of them */
    double load_ratio_mean, load_ratio_max;
    double prof_step_ms;              /* wall time of the profiled step; NaN without profiling */
    double phase_ms[ZY_STEP_NPHASES]; /* the profiled step's phases (timed, device synchronised) */
    bench_train_op *ops;              /* [nops] most time first (profiling only) */
    int nops;
    bench_machine machine;
} bench_train_result;

/* Runs the benchmark (o must pass bench_train_check); fills r (free with
 * bench_train_result_free, also after an error). */
int bench_train_run(const bench_train_opts *o, bench_train_result *r);
void bench_train_result_free(bench_train_result *r);
/* Prints the human table. */
void bench_train_print(FILE *f, const bench_train_opts *o, const bench_train_result *r);
/* The JSON object: config, device, batch, seq, steps, step_ms {mean, min, max, all},
 * tokens_per_s, model_tflops, mfu, peak_tflops, mem_gib, optim, breakdown [{op, calls,
 * ms_per_step, pct}] and the details (memory, params, loss, phases, machine). */
cJSON *bench_train_to_json(const bench_train_opts *o, const bench_train_result *r);
/* Writes the JSON object to path atomically. */
int bench_train_write(const char *path, const bench_train_opts *o, const bench_train_result *r);

/* Free and total bytes of CUDA device dev (train_bench_mem.cu; an error without CUDA). */
int bench_train_gpu_mem(int dev, size_t *free_bytes, size_t *total_bytes);

#endif
