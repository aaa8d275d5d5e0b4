/* The trainer's checkpoints (see trainer.h): saving (every rank its share of the optimizer state,
 * rank 0 the folder), resuming (state read by global name, so the ranks reading need not be the
 * ranks that wrote) and the check that replicated weights agree across ranks. */
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

/* The weights readable on the host: the model's own buffer on the CPU, a fresh copy on a GPU. */
static const float *params_on_host(trainer *tr) {
    zy_model *m = &tr->st.model;
    if (m->ctx->device == ZY_DEV_CPU) return m->params;
    size_t bytes = m->table.total * sizeof(float);
    if (!tr->params_host) tr->params_host = zy_malloc(bytes);
    ops_copy(m->ctx, tr->params_host, m->params, bytes);
    return tr->params_host;
}

/* Copies a named state list into a checkpoint's train_state items. */
static void add_state_items(zy_st_write_item *items, int *n, const zy_state_tensor *st, int count) {
    for (int i = 0; i < count; i++) {
        items[*n].name = st[i].name;
        items[*n].dtype = ZY_ST_F32;
        items[*n].ndim = st[i].ndim;
        items[*n].shape = st[i].shape;
        items[*n].data = st[i].data;
        (*n)++;
    }
}

/* Replicated state must stay identical on every rank (the same reduced gradients, the same
 * update): checked at every checkpoint by comparing each rank's CRC-32C of the weights, so a
 * silent divergence (a nondeterministic kernel, a bit flip) is caught instead of saved. */
int trainer_check_replicas(trainer *tr) {
    ZY_TRY(step_weights_whole(&tr->st));
    const float *p = params_on_host(tr);
    int64_t crc[2];
    crc[0] = zy_crc32c(0, p, tr->st.model.table.total * sizeof *p);
    crc[1] = -crc[0];
    ZY_TRY(comm_all_reduce(&tr->ranks.comm, crc, 2, ZY_COMM_I64, ZY_COMM_MAX));
    if (crc[0] != -crc[1])
        return zy_fail_runtime("step %lld: the ranks' weights differ (replicated state diverged)",
                               (long long)tr->st.step);
    return ZY_OK;
}

/* ZeRO-1 checkpoints: rank r > 0 writes the optimizer state it owns (global names) to
 * ROOT/.shards_step_N/train_state.rank_R.safetensors; rank 0 moves every shard into the folder it
 * commits. The ranks agree that every shard was written before rank 0 commits, and that the
 * commit succeeded before any of them goes on. */
static void shard_path(const trainer *tr, int rank, char *buf, size_t n) {
    snprintf(buf, n, "%s/.shards_step_%09lld/train_state.rank_%d.safetensors", tr->ckpt_root,
             (long long)tr->st.step, rank);
}

static int write_state_shard(trainer *tr) {
    char path[ZY_PATH_MAX + 128];
    shard_path(tr, tr->ranks.comm.rank, path, sizeof path);
    char *slash = strrchr(path, '/');
    *slash = 0;
    int rc = zy_mkdirs(path);
    *slash = '/';
    int no;
    zy_state_tensor *so = optim_state_tensors(&tr->st.opt, &tr->st.model.table, &no);
    zy_st_write_item *items = zy_calloc((size_t)no + 1, sizeof *items);
    int n = 0;
    add_state_items(items, &n, so, no);
    const char *meta[2] = {"format", "zayac-train-state"};
    if (rc == ZY_OK) rc = safetensors_write(path, items, n, meta, 1);
    free(items);
    free(so);
    return rc;
}

/* Every rank's status in; ZY_OK only when all are ZY_OK (a failed rank's error stays its own). */
static int all_ok(trainer *tr, int rc, const char *what) {
    int64_t failed = rc != ZY_OK;
    if (comm_all_reduce(&tr->ranks.comm, &failed, 1, ZY_COMM_I64, ZY_COMM_MAX) != ZY_OK)
        return ZY_ERR;
    if (failed && rc == ZY_OK)
        return zy_fail_runtime("step %lld: another rank failed %s", (long long)tr->st.step, what);
    return rc;
}

static int save_checkpoint_rank0(trainer *tr);

/* Collective over the ranks (one rank: just rank 0's save). */
int trainer_save_checkpoint(trainer *tr) {
    ZY_TRY(step_weights_whole(&tr->st)); /* collective: before the ranks part ways */
    optim_state_to_host(&tr->st.opt);    /* the moments' host mirror (itself on the CPU) */
    if (tr->ranks.comm.world == 1) return save_checkpoint_rank0(tr);
    int rc = tr->ranks.comm.rank > 0 ? write_state_shard(tr) : ZY_OK;
    rc = all_ok(tr, rc, "writing its checkpoint shard");
    if (rc == ZY_OK && tr->ranks.comm.rank == 0) rc = save_checkpoint_rank0(tr);
    return all_ok(tr, rc, "committing the checkpoint");
}

static int save_checkpoint_rank0(trainer *tr) {
    int no, nb;
    zy_state_tensor *so = optim_state_tensors(&tr->st.opt, &tr->st.model.table, &no);
    zy_state_tensor *sb = balance_state_tensors(&tr->st.bal, &nb);
    zy_st_write_item *items = zy_calloc((size_t)(no + nb), sizeof *items);
    int n = 0;
    add_state_items(items, &n, so, no);
    add_state_items(items, &n, sb, nb);
    cJSON *st = cJSON_CreateObject();
    cJSON_AddNumberToObject(st, "step", (double)tr->st.step);
    cJSON_AddNumberToObject(st, "optimizer_step", (double)tr->st.opt.step);
    cJSON_AddNumberToObject(st, "balance_step", (double)tr->st.bal.step);
    cJSON_AddNumberToObject(st, "tokens_seen", tr->tokens_seen);
    cJSON_AddNumberToObject(st, "seed", (double)tr->cfg->seed);
    char *loader = batches_state_json(tr->train);
    cJSON_AddItemToObject(st, "train_loader", cJSON_Parse(loader));
    free(loader);
    char *json = cJSON_Print(st);
    cJSON_Delete(st);
    const int W = tr->ranks.comm.world;
    char **shards = zy_calloc((size_t)W, sizeof *shards);
    for (int r = 1; r < W; r++) {
        shards[r - 1] = zy_malloc(ZY_PATH_MAX + 128);
        shard_path(tr, r, shards[r - 1], ZY_PATH_MAX + 128);
    }
    zy_ckpt_content c = {.config = &tr->st.model.cfg,
                         .table = &tr->st.model.table,
                         .params = params_on_host(tr),
                         .state = items,
                         .n_state = n,
                         .state_json = json,
                         .tokenizer_path = tr->cfg->tokenizer[0] ? tr->cfg->tokenizer : NULL,
                         .extra_files = (const char *const *)shards,
                         .n_extra = W - 1};
    char dir[4096];
    int rc = ckpt_save(tr->ckpt_root, tr->st.step, &c, tr->cfg->keep_checkpoints, dir, sizeof dir);
    if (W > 1) { /* the emptied staging folder */
        char *slash = strrchr(shards[0], '/');
        *slash = 0;
        zy_remove_tree(shards[0]);
    }
    for (int r = 0; r < W; r++) free(shards[r]);
    free(shards);
    if (rc == ZY_OK && tr->ranks.comm.world > 1)
        printf("checkpoint: %s (weights identical on all %d ranks)\n", dir, tr->ranks.comm.world);
    else if (rc == ZY_OK)
        printf("checkpoint: %s\n", dir);
    free(json);
    free(items);
    free(so);
    free(sb);
    return rc;
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

/* Opens dir's train_state.safetensors and train_state.rank_*.safetensors (at most max). */
static int open_state_files(const char *dir, zy_safetensors *f, int max, int *nf) {
    char path[4096];
    *nf = 0;
    ZY_TRY(zy_path_join(path, sizeof path, dir, "train_state.safetensors"));
    ZY_TRY(safetensors_open(&f[(*nf)++], path));
    for (int r = 1; r < max; r++) {
        char name[64];
        snprintf(name, sizeof name, "train_state.rank_%d.safetensors", r);
        ZY_TRY(zy_path_join(path, sizeof path, dir, name));
        if (!zy_path_exists(path)) break;
        if (safetensors_open(&f[*nf], path) != ZY_OK) return ZY_ERR;
        (*nf)++;
    }
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
    ZY_TRY(hf_load_model(&tr->st.model, dir, ZY_SKIP_BIAS_HF));
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
    ZY_TRY(zy_path_join(path, sizeof path, dir, "state.json"));
    ZY_TRY(zy_read_file(path, &text, NULL));
    cJSON *st = cJSON_Parse(text);
    free(text);
    if (!st) return zy_fail("%s: not valid JSON", path);
    int64_t opt_step = 0, bal_step = 0;
    rc = read_counters(tr, st, dir, path, &opt_step, &bal_step);
    const cJSON *loader = cJSON_GetObjectItemCaseSensitive(st, "train_loader");
    if (rc == ZY_OK && !loader) rc = zy_fail("%s: missing \"train_loader\"", path);
    if (rc == ZY_OK) {
        char *lj = cJSON_PrintUnformatted(loader);
        rc = batches_restore(tr->train, lj, path);
        free(lj);
    }
    cJSON_Delete(st);
    tr->st.opt.step = opt_step;
    tr->st.bal.step = bal_step;
    return rc;
}
