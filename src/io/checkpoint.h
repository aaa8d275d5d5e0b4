/* Training checkpoints: a folder that is either complete or absent.
 *   ROOT/step_000001234/
 *     model/  an HF model folder (loads in transformers and zayac as is): config.json, the fp32
 *             master weights (model.safetensors, or one model-0000K-of-0000N.safetensors per
 *             rank that owns tensors with model.safetensors.index.json), tokenizer.json and
 *             tokenizer_config.json (if any);
 *     train/  train_state.rank_R.safetensors (each rank's optimiser moments by global name; rank
 *             0's also the balancing state), state.json (step, counters, loader position, ...);
 *     manifest.json (every file's size and CRC-32C; written last).
 * Every rank writes its own files (its weights and its state: no rank gathers the whole state);
 * one writer commits the folder.
 * A save writes ROOT/.tmp_step_..., fsyncs every file and the folder, renames it into place and
 * fsyncs ROOT; a crash at any point leaves the previous checkpoints untouched. Pruning renames a
 * folder aside (ROOT/.deleting_...) before deleting it; the next save removes what a crash left. */
#ifndef ZY_CHECKPOINT_H
#define ZY_CHECKPOINT_H

#include "io/safetensors.h"
#include "model/config.h"
#include "tensor/params.h"

#include <stddef.h>

/* What the committing writer saves itself, and the files the other writers made. */
typedef struct {
    const zy_config *config;
    const zy_param_table *table;
    const float *params; /* host fp32 weights laid out by table; entries [first, last) are saved */
    int first, last;     /* first == last == 0: every entry */
    const char *model_file;        /* its weights' file under model/ (NULL: model.safetensors) */
    const char *model_index;       /* model.safetensors.index.json's text, or NULL (one file) */
    const zy_st_write_item *state; /* named training-state tensors: train/train_state.rank_0 */
    int n_state;
    const char *state_json;     /* JSON text: step, RNGs, loader position, ... */
    const char *tokenizer_path; /* copied in as model/tokenizer.json when not NULL */
    /* files other writers made (fsynced): moved into the folder under extra_names ("model/...",
     * "train/...") and listed in the manifest like the rest */
    const char *const *extra_files, *const *extra_names;
    int n_extra;
} zy_ckpt_content;

/* Saves checkpoint `step` (>= 0) under root, then keeps only the newest keep_last (0 = all) of the
 * steps at or below `step`: higher steps (left by a run resumed from an older checkpoint) are
 * neither counted nor removed. Re-saving an existing step replaces it atomically. The folder
 * written goes to saved_dir (may be NULL). */
int ckpt_save(const char *root, long long step, const zy_ckpt_content *c, int keep_last,
              char *saved_dir, size_t n);
/* Checks a checkpoint folder: manifest present and parseable, every file listed with the right
 * size and CRC-32C, the required files listed. The error names the folder and the first problem.
 * A folder of the first layout (every file at the top) still verifies. */
int ckpt_verify(const char *dir);
/* The path of a checkpoint's file given by its place in this layout ("model", "train/state.json",
 * "train"): a folder of the first layout has everything at the top. */
int ckpt_path(const char *dir, const char *file, char *buf, size_t n);

typedef struct {
    char dir[4096]; /* newest complete checkpoint ("" when there is none) */
    long long step;
    int n_skipped;        /* newer folders that failed verification */
    char skipped[4][600]; /* their errors (first four) */
} zy_ckpt_found;

/* Finds the newest checkpoint under root that verifies; skips (and reports in f) corrupt ones. */
int ckpt_find_latest(const char *root, zy_ckpt_found *f);
/* The number of step folders under root (complete or not; 0 without root), the newest step into
 * *newest (-1 when none; may be NULL). */
int ckpt_list(const char *root, long long *newest);
/* Removes every checkpoint under root, each renamed aside before it is deleted (so none is ever
 * half there under its name). */
int ckpt_remove_all(const char *root);
/* The step a checkpoint folder's name says (.../step_000001234 -> 1234), -1 for another name. */
long long ckpt_step_of(const char *dir);

#endif
