/* The trainer's checkpoints (see trainer.h), apart from saving (train_save.c): resuming (state
 * read by global name, so the ranks reading need not be the ranks that wrote) and the check that
 * replicated weights agree across ranks. */
#include "train/trainer.h"
#include "base/crc32c.h"
#include "base/err.h"
#include "base/fileio.h"
#include "io/checkpoint.h"
#include "io/hf_model.h"
#include "io/safetensors.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* CRC-32C of the entries of t with at[i] != NULL (entry i's floats at at[i]), each cut into fixed
 * pieces, each piece on its own thread, then of the pieces' CRCs: the same value for any number
 * of threads, at the memory bandwidth of every core rather than one core's 1-2 GB/s (the weights
 * are checked at every checkpoint, while training waits). */
static uint32_t weights_crc(const zy_param_table *t, const float *const *at) {
    enum { PIECE = 1 << 24 }; /* floats: 64 MiB */
    size_t pieces = 0;
    for (int i = 0; i < t->count; i++)
        if (at[i]) pieces += (t->items[i].numel + PIECE - 1) / PIECE;
    const float **from = zy_calloc(pieces + 1, sizeof *from);
    size_t *len = zy_calloc(pieces + 1, sizeof *len), k = 0;
    for (int i = 0; i < t->count; i++)
        for (size_t o = 0; at[i] && o < t->items[i].numel; o += PIECE) {
            from[k] = at[i] + o;
            len[k++] = t->items[i].numel - o < PIECE ? t->items[i].numel - o : PIECE;
        }
    uint32_t *crc = zy_calloc(pieces + 1, sizeof *crc);
#pragma omp parallel for schedule(dynamic)
    for (size_t i = 0; i < pieces; i++) crc[i] = zy_crc32c(0, from[i], len[i] * sizeof(float));
    const uint32_t all = zy_crc32c(0, crc, pieces * sizeof *crc);
    free(crc);
    free(from);
    free(len);
    return all;
}

/* Replicated state must stay identical on every rank (the same reduced gradients, the same
 * update, the same bytes received from each owner): checked at every checkpoint by comparing
 * the ranks' checksums of the weights every rank keeps, so a silent divergence (a
 * nondeterministic kernel, a bit flip) is caught instead of saved. */
int trainer_check_replicas(trainer *tr, const float *const *at) {
    const zy_param_table *t = &tr->st.model.table;
    const float **sel = zy_calloc((size_t)t->count + 1, sizeof *sel);
    for (int i = 0; i < t->count; i++) sel[i] = step_master_everywhere(&tr->st, i) ? at[i] : NULL;
    int64_t crc[2];
    crc[0] = weights_crc(t, sel);
    crc[1] = -crc[0];
    free(sel);
    ZY_TRY(comm_all_reduce(&tr->ranks.comm, crc, 2, ZY_COMM_I64, ZY_COMM_MAX));
    if (crc[0] != -crc[1])
        return zy_fail_runtime("step %lld: the ranks' weights differ (replicated state diverged)",
                               (long long)tr->st.step);
    return ZY_OK;
}

/* Reads each named state tensor from whichever of the files holds it (a checkpoint written by
 * several ranks holds rank 0's train_state.safetensors and the others' train_state.rank_R files;
 * names are global, so the ranks reading need not be the ranks that wrote). */
static int load_state_tensors(const zy_safetensors *f, int nf, const char *dir, zy_state_tensor *st,
                              int count) {
    for (int i = 0; i < count; i++) {
        int k = 0;
        while (k < nf && safetensors_find(&f[k], st[i].name) < 0) k++;
        if (k == nf)
            return zy_fail("%s: no training-state file holds %s (a checkpoint of another "
                           "optimizer?)",
                           dir, st[i].name);
        ZY_TRY(safetensors_read_f32(&f[k], st[i].name, st[i].ndim, st[i].shape, st[i].data));
    }
    return ZY_OK;
}

/* Opens the training-state files of a checkpoint (at most max): train/train_state.rank_R for R
 * = 0, 1, ... (the first layout: train_state.safetensors and train_state.rank_R at the top). */
static int open_state_files(const char *dir, zy_safetensors *f, int max, int *nf) {
    char train[4096], path[4096], name[64];
    *nf = 0;
    ZY_TRY(ckpt_path(dir, "train", train, sizeof train));
    for (int r = 0; r < max; r++) {
        snprintf(name, sizeof name, "train_state.rank_%d.safetensors", r);
        ZY_TRY(zy_path_join(path, sizeof path, train, name));
        if (r == 0 && !zy_path_exists(path)) /* the first layout */
            ZY_TRY(zy_path_join(path, sizeof path, train, "train_state.safetensors"));
        if (!zy_path_exists(path)) break;
        if (safetensors_open(&f[*nf], path) != ZY_OK) return ZY_ERR;
        (*nf)++;
    }
    if (*nf == 0) return zy_fail("%s: no training-state file", dir);
    return ZY_OK;
}

/* A counter of state.json: an integer in [lo, hi]. */
static int json_int(const cJSON *o, const char *key, const char *source, int64_t lo, int64_t hi,
                    int64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v)) return zy_fail("%s: missing or non-numeric \"%s\"", source, key);
    const double x = v->valuedouble;
    if (!(x >= (double)lo && x <= (double)hi) || x != floor(x))
        return zy_fail("%s: \"%s\" is %.17g; expected an integer in [%lld, %lld]", source, key, x,
                       (long long)lo, (long long)hi);
    *out = (int64_t)x;
    return ZY_OK;
}

/* The step, optimizer and balancing counters of state.json: the step is the folder's, the
 * others no larger (each counts steps that ran). */
static int read_counters(trainer *tr, const cJSON *st, const char *dir, const char *path,
                         int64_t *opt_step, int64_t *bal_step) {
    const int64_t most = (int64_t)1 << 53, folder = ckpt_step_of(dir);
    ZY_TRY(json_int(st, "step", path, 0, most, &tr->st.step));
    if (folder >= 0 && tr->st.step != folder)
        return zy_fail("%s: \"step\" is %lld but the folder is step %lld", path,
                       (long long)tr->st.step, (long long)folder);
    ZY_TRY(json_int(st, "optimizer_step", path, 0, tr->st.step, opt_step));
    ZY_TRY(json_int(st, "balance_step", path, 0, tr->st.step, bal_step));
    const cJSON *tok = cJSON_GetObjectItemCaseSensitive(st, "tokens_seen");
    tr->tokens_seen = cJSON_IsNumber(tok) ? tok->valuedouble : 0;
    if (!(tr->tokens_seen >= 0 && tr->tokens_seen < 1e21))
        return zy_fail("%s: \"tokens_seen\" is %g; expected a count >= 0", path, tr->tokens_seen);
    return ZY_OK;
}

int trainer_resume_from(trainer *tr, const char *dir) {
    char path[4096], *text;
    ZY_TRY(ckpt_path(dir, "model", path, sizeof path));
    ZY_TRY(hf_load_model(&tr->st.model, path, ZY_SKIP_BIAS_HF));
    enum { MAX_STATE_FILES = 1024 };
    zy_safetensors *f = zy_calloc(MAX_STATE_FILES, sizeof *f);
    int nf = 0;
    int rc = open_state_files(dir, f, MAX_STATE_FILES, &nf);
    int no = 0, nb = 0;
    zy_state_tensor *so = optim_state_tensors(&tr->st.opt, &tr->st.model.table, &no);
    zy_state_tensor *sb = balance_state_tensors(&tr->st.bal, &nb);
    if (rc == ZY_OK) rc = load_state_tensors(f, nf, dir, so, no);
    if (rc == ZY_OK) optim_state_from_host(&tr->st.opt);
    if (rc == ZY_OK) rc = load_state_tensors(f, nf, dir, sb, nb);
    free(so);
    free(sb);
    for (int k = 0; k < nf; k++) safetensors_close(&f[k]);
    free(f);
    ZY_TRY(rc);
    ZY_TRY(ckpt_path(dir, "train/state.json", path, sizeof path));
    ZY_TRY(zy_read_file(path, &text, NULL));
    cJSON *st = cJSON_Parse(text);
    free(text);
    if (!st) return zy_fail("%s: not valid JSON", path);
    int64_t opt_step = 0, bal_step = 0;
    rc = read_counters(tr, st, dir, path, &opt_step, &bal_step);
    if (rc == ZY_OK) rc = trainer_phases_resume(tr, st, path);   /* the phase, the data position */
    if (rc == ZY_OK) rc = spike_resume(&tr->st.spike, st, path); /* the loss-spike mean */
    cJSON_Delete(st);
    tr->st.opt.step = opt_step;
    tr->st.bal.step = bal_step;
    return rc;
}
