/* The training configuration: a JSON file (model preset or HF config, data sources with weights,
 * batch, sequence length, accumulation, steps, optimiser, schedule, intervals, output folder),
 * with command-line overrides. The keys, types, ranges, defaults and docs are one table
 * (train/settings.h); this struct is the typed view the trainer reads. Every field is checked; an
 * error names the field and the file. */
#ifndef ZY_TRAIN_CONFIG_H
#define ZY_TRAIN_CONFIG_H

#include "model/config.h"
#include "optim/balance.h"
#include "optim/optim.h"
#include "optim/schedule.h"
#include "train/spike.h"

#include <stddef.h>
#include <stdint.h>

#define ZY_MAX_SOURCES 16
#define ZY_MAX_PROMPTS 8
#define ZY_PATH_MAX    1024
#define ZY_MAX_PHASES  8

typedef struct {
    char path[ZY_PATH_MAX]; /* a folder written by `zayac data prepare` */
    double weight;
} zy_data_source;

/* The keys a phase gave (the others carry on from the phase before it; the first phase's from the
 * top-level keys); bits of zy_phase.given. */
enum {
    ZY_PHASE_HAS_STEPS = 1 << 0,
    ZY_PHASE_HAS_TOKENS = 1 << 1,
    ZY_PHASE_HAS_BATCH = 1 << 2,
    ZY_PHASE_HAS_SEQ = 1 << 3,
    ZY_PHASE_HAS_THETA = 1 << 4,         /* rope_theta of the hybrid (global-attention) layers */
    ZY_PHASE_HAS_THETA_SLIDING = 1 << 5, /* rope_theta of the hybrid_sliding layers */
    ZY_PHASE_HAS_DATA = 1 << 6,
    ZY_PHASE_HAS_SCHEDULE = 1 << 7,
};

/* One phase of a multi-phase recipe ("phases": train/phases.h runs them one after another). After
 * train_config_build every field holds the phase's resolved value. */
typedef struct {
    char name[32]; /* for logs ("" = none) */
    unsigned given;
    int64_t steps;      /* optimiser steps (from tokens: rounded up to whole steps) */
    int64_t tokens;     /* the length as given in tokens (0: given as steps) */
    int64_t first_step; /* the run's step count when the phase starts */
    int batch_size, seq_len;
    double rope_theta[2]; /* by zy_layer_type */
    zy_data_source sources[ZY_MAX_SOURCES];
    int n_sources;
    zy_schedule schedule; /* given: over the phase's own steps; else the run's schedule */
} zy_phase;

typedef struct {
    zy_config model;              /* from "model": a preset name, a config.json path or an object */
    char model_desc[ZY_PATH_MAX]; /* what "model" named, for logs */
    int model_inline;             /* 1: "model" was an inline HF config object */
    char init_from[ZY_PATH_MAX];  /* optional HF checkpoint folder to start from ("" = fresh) */
    char tokenizer[ZY_PATH_MAX];  /* optional tokenizer.json (copied into checkpoints, samples) */
    zy_data_source sources[ZY_MAX_SOURCES];
    int n_sources;
    int batch_size, seq_len, grad_accum;
    int recompute; /* activation recomputation: each layer's forward again in the backward */
    int64_t steps;
    zy_optim_config optim;
    zy_schedule schedule;
    float grad_clip;       /* 0 = off */
    zy_spike_config spike; /* loss-spike detection (train/spike.h) */
    zy_balance_config balance;
    int balance_enabled;
    int64_t eval_interval, eval_batches, checkpoint_interval, log_interval;
    int keep_checkpoints;
    int checkpoint_async;  /* write checkpoints in the background while training goes on */
    float mfu_peak_tflops; /* peak of one device for the MFU in the log; 0 = not reported */
    char out_dir[ZY_PATH_MAX];
    uint64_t seed;
    char device[16];                   /* "auto", "cpu", "cuda" */
    int threads;                       /* OpenMP threads (0 = all cores) */
    char prompts[ZY_MAX_PROMPTS][256]; /* sampled at validations and the end (tokenizer set) */
    int n_prompts;
    int sample_tokens;
    float sample_temperature, sample_top_p;
    zy_cuda_opts cuda;    /* how a CUDA context runs the expert GEMMs (ops_ctx_init_cuda_opts) */
    float dist_timeout_s; /* data parallel: the longest wait for a peer (dist/comm.h) */
    zy_phase phases[ZY_MAX_PHASES]; /* "phases" (none: the run is one phase of the keys above) */
    int n_phases;
    /* the run's step at which schedule's step 0 falls: 0, or a phase's first step when the phase
     * has a schedule of its own (a phase's view of the config, train/phases.h) */
    int64_t schedule_start;
} zy_train_config;

/* Fills defaults (tiny model, AdamW+Muon, cosine schedule, ...): the table's. */
void train_config_defaults(zy_train_config *c);
/* Builds the config: defaults, then the JSON file `path` (may be NULL), then each override
 * "dotted.key=value" (value parsed by the key's type, settings_override), then checks every field
 * and the fields together. Unknown keys are errors (a typo must not be silently ignored). A warmup
 * longer than the run is shortened to the run, with a warning on stderr. *json_out (if not NULL)
 * gets the resolved config as JSON text (heap; every default included, train_config_json). */
int train_config_build(zy_train_config *c, const char *path, const char *const *overrides,
                       int n_overrides, char **json_out);
/* The resolved config as JSON text (heap): read back as a config it gives the same config. */
char *train_config_json(const zy_train_config *c);
/* The keys whose values differ between two resolved configs (JSON texts, as train_config_json
 * writes them), as lines "  key: old -> new" into out[n] (dotted paths; list items as
 * "phases[1].data"); returns how many differ, -1 when a text is not a JSON object. */
int train_config_diff(const char *old_json, const char *new_json, char *out, size_t n);

#endif
