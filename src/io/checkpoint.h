/* Training checkpoints: a folder that is either complete or absent.
 *   ROOT/step_000001234/ config.json, model.safetensors (fp32 master weights, loads in HF as is),
 *                        train_state.safetensors (optimiser moments, balancing state, by name),
 *                        state.json (step, RNGs, loader position, ...), tokenizer.json (if any),
 *                        manifest.json (every file's size and CRC-32C; written last).
 * A save writes ROOT/.tmp_step_..., fsyncs every file and the folder, renames it into place and
 * fsyncs ROOT; a crash at any point leaves the previous checkpoints untouched. Pruning renames a
 * folder aside (ROOT/.deleting_...) before deleting it; the next save removes what a crash left. */
#ifndef ZY_CHECKPOINT_H
#define ZY_CHECKPOINT_H

#include "io/safetensors.h"
#include "model/config.h"
#include "tensor/params.h"

#include <stddef.h>

typedef struct {
    const zy_config *config;
    const zy_param_table *table;
    const float *params;           /* host fp32 weights laid out by table */
    const zy_st_write_item *state; /* named training-state tensors */
    int n_state;
    const char *state_json;     /* JSON text: step, RNGs, loader position, ... */
    const char *tokenizer_path; /* copied in as tokenizer.json when not NULL */
    /* files other ranks wrote (their shards of the training state, fsynced): moved into the
     * folder under their base names and listed in the manifest like the rest */
    const char *const *extra_files;
    int n_extra;
} zy_ckpt_content;

/* Saves checkpoint `step` (>= 0) under root, then keeps only the newest keep_last (0 = all) of the
 * steps at or below `step`: higher steps (left by a run resumed from an older checkpoint) are
 * neither counted nor removed. Re-saving an existing step replaces it atomically. The folder
 * written goes to saved_dir (may be NULL). */
int ckpt_save(const char *root, long long step, const zy_ckpt_content *c, int keep_last,
              char *saved_dir, size_t n);
/* Checks a checkpoint folder: manifest present and parseable, every file listed with the right
 * size and CRC-32C. The error names the folder and the first problem. */
int ckpt_verify(const char *dir);

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
