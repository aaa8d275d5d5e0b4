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

#include <stdint.h>

#define ZY_MAX_SOURCES 16
#define ZY_MAX_PROMPTS 8
#define ZY_PATH_MAX    1024

typedef struct {
    char path[ZY_PATH_MAX]; /* a folder written by `zayac data prepare` */
    double weight;
} zy_data_source;

typedef struct {
    zy_config model;              /* from "model": a preset name, a config.json path or an object */
    char model_desc[ZY_PATH_MAX]; /* what "model" named, for logs */
    int model_inline;             /* 1: "model" was an inline HF config object */
    char init_from[ZY_PATH_MAX];  /* optional HF checkpoint folder to start from ("" = fresh) */
    char tokenizer[ZY_PATH_MAX];  /* optional tokenizer.json (copied into checkpoints, samples) */
    zy_data_source sources[ZY_MAX_SOURCES];
    int n_sources;
    int batch_size, seq_len, grad_accum;
    int64_t steps;
    zy_optim_config optim;
    zy_schedule schedule;
    float grad_clip; /* 0 = off */
    zy_balance_config balance;
    int balance_enabled;
    int64_t eval_interval, eval_batches, checkpoint_interval, log_interval;
    int keep_checkpoints;
    int checkpoint_async; /* write checkpoints in the background while training goes on */
    char out_dir[ZY_PATH_MAX];
    uint64_t seed;
    char device[16];                   /* "auto", "cpu", "cuda" */
    int threads;                       /* OpenMP threads (0 = all cores) */
    char prompts[ZY_MAX_PROMPTS][256]; /* sampled at the end when a tokenizer is set */
    int n_prompts;
    int sample_tokens;
    float sample_temperature, sample_top_p;
    zy_cuda_opts cuda;    /* how a CUDA context runs the expert GEMMs (ops_ctx_init_cuda_opts) */
    float dist_timeout_s; /* data parallel: the longest wait for a peer (dist/comm.h) */
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

#endif
