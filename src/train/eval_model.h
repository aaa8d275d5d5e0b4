/* A model loaded for evaluation: the device it runs on (a GPU when one is visible, unless told),
 * its weights, one activation arena of [B, T] and the host batch the next forward reads. The eval
 * commands (train/eval_tasks.h, train/eval_text.h) fill ids/targets and ask for the summed
 * negative log-likelihood of the counted targets; the loss is formed on the device, so nothing of
 * size V leaves it. */
#ifndef ZY_TRAIN_EVAL_MODEL_H
#define ZY_TRAIN_EVAL_MODEL_H

#include "io/hf_model.h"
#include "model/model.h"

#include <stdint.h>

typedef struct {
    zy_ctx ctx;
    zy_model model;
    zy_acts acts;
    int B, T;               /* the arena's shape (0 before eval_model_shape) */
    int32_t *ids, *targets; /* [B, T] host: ZY_IGNORE_INDEX targets are not counted */
    int have_ctx, have_model, have_acts;
} zy_eval_model;

/* Loads model_dir (an HF folder) on device: "auto" (GPU 0 when one is visible, else the CPU),
 * "cpu" or "cuda" (an error without a GPU); rule as io/hf_model.h. *em is safe to free after a
 * failure. */
int eval_model_open(zy_eval_model *em, const char *model_dir, zy_skip_bias_rule rule,
                    const char *device);
/* (Re)allocates the arena and the host batch for [B, T]; T must be within the model's
 * max_position_embeddings. Clears the batch to id 0 and ignored targets. */
int eval_model_shape(zy_eval_model *em, int B, int T);
/* Clears the host batch: id 0, every target ignored. */
void eval_model_clear(zy_eval_model *em);
/* Runs the forward on the host batch: returns the summed -log p(target) over the counted targets
 * (natural log) and their number in *count. */
double eval_model_nll(zy_eval_model *em, int64_t *count);
/* "CPU, 2 threads" or "GPU 0 (bf16 activations)". */
void eval_model_describe(const zy_eval_model *em, char *buf, size_t n);
void eval_model_free(zy_eval_model *em);

#endif
