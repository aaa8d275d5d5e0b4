/* The trainer's checkpoint saves (see trainer.h), written by a background thread while training
 * goes on.
 *
 * The training thread takes a snapshot of what this rank writes: the fp32 weights of the tensors
 * it owns (ZeRO-1: current on their owner, so no weight is gathered) and their optimizer state
 * (a split entry's moments gathered whole first, step_state_whole);
 * rank 0 also the balancing state and state.json. The snapshot goes to host buffers made once at
 * the start and reused (trainer.h): on a GPU pinned memory, filled by copies queued on the stream
 * with one wait, so the pause is the device-to-host transfer. A writer thread then writes the
 * files (io/checkpoint.h's layout): rank r > 0 its model-(r+1)-of-W.safetensors
 * and train_state.rank_R.safetensors into ROOT/.shards_step_N/, then a marker beside them
 * (done.rank_R, or failed.rank_R holding its error); rank 0 its own files, then it waits for
 * every marker (within dist.timeout_s) and commits the folder with the other ranks' files moved
 * into model/ and train/ and listed in its manifest (atomic). No rank holds or writes the whole
 * state. The writer threads only write files
 * (no device, no communicator), so the ranks agree on the outcome from the training thread: at the
 * next save, or at the end, every rank joins its writer and the ranks compare results. At most
 * one save is in flight; a failed one is reported and the next is attempted. */
#include "train/trainer.h"
#include "base/err.h"
#include "base/fileio.h"
#include "base/timer.h"
#include "io/checkpoint.h"
#include "io/hf_checkpoint.h"
#include "train/fault.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* The fault injection's full disk (ZAYAC_FAULT=enospc, train/fault.h), and a test hook:
 * ZAYAC_CKPT_DELAY_MS=M slows every writer by M ms, so a save is still in flight when the next one
 * is asked for. */
static int injected_failure(long long step, int rank) {
    ZY_TRY(fault_checkpoint_write(step, rank));
    const char *d = getenv("ZAYAC_CKPT_DELAY_MS");
    if (d && atol(d) > 0) {
        struct timespec ts = {atol(d) / 1000, (atol(d) % 1000) * 1000000L};
        nanosleep(&ts, NULL);
    }
    return ZY_OK;
}

static void staging_dir(const trainer_save *j, char *buf, size_t n) {
    snprintf(buf, n, "%s/.shards_step_%09lld", j->root, j->step);
}

static void staging_file(const trainer_save *j, const char *name, char *buf, size_t n) {
    snprintf(buf, n, "%s/.shards_step_%09lld/%s", j->root, j->step, name);
}

/* Rank r's files, by their names in the folder: its weights' shard (one file without ranks) and
 * its training state. */
static void model_name(const trainer_save *j, int r, char *buf, size_t n) {
    if (j->world == 1)
        snprintf(buf, n, "model.safetensors");
    else
        snprintf(buf, n, "model-%05d-of-%05d.safetensors", r + 1, j->world);
}

static void state_name(int r, char *buf, size_t n) {
    snprintf(buf, n, "train_state.rank_%d.safetensors", r);
}

static void marker_name(int r, int ok, char *buf, size_t n) {
    snprintf(buf, n, "%s.rank_%d", ok ? "done" : "failed", r);
}

/* This rank's entries as a table of their own, offsets into the snapshot of their weights. */
static zy_param_table owned_table(const trainer_save *j) {
    zy_param_table v;
    memset(&v, 0, sizeof v);
    v.count = j->last - j->first;
    v.items = zy_calloc((size_t)v.count + 1, sizeof *v.items);
    const size_t base = v.count ? j->table->items[j->first].offset : 0;
    for (int i = 0; i < v.count; i++) {
        v.items[i] = j->table->items[j->first + i];
        v.items[i].offset -= base;
    }
    return v;
}

/* The state tensors as safetensors items. */
static zy_st_write_item *state_items(const trainer_save *j, int *n) {
    zy_st_write_item *items = zy_calloc((size_t)(j->no + j->nb) + 1, sizeof *items);
    *n = 0;
    for (int k = 0; k < 2; k++) {
        const zy_state_tensor *st = k ? j->sb : j->so;
        for (int i = 0; i < (k ? j->nb : j->no); i++, (*n)++) {
            items[*n].name = st[i].name;
            items[*n].dtype = ZY_ST_F32;
            items[*n].ndim = st[i].ndim;
            items[*n].shape = st[i].shape;
            items[*n].data = st[i].data;
        }
    }
    return items;
}

/* Rank r > 0: its weights and its state, then the marker that says how it went. */
static int write_shard(trainer_save *j) {
    char path[ZY_PATH_MAX + 512], name[128];
    staging_dir(j, path, sizeof path);
    int rc = zy_mkdirs(path), n;
    if (rc == ZY_OK) rc = injected_failure(j->step, j->rank);
    if (rc == ZY_OK && j->last > j->first) {
        zy_param_table own = owned_table(j);
        model_name(j, j->rank, name, sizeof name);
        staging_file(j, name, path, sizeof path);
        rc = hf_save_weights_range(path, &own, j->params, ZY_ST_F32, 0, own.count);
        free(own.items);
    }
    state_name(j->rank, name, sizeof name);
    staging_file(j, name, path, sizeof path);
    zy_st_write_item *items = state_items(j, &n);
    const char *meta[2] = {"format", "zayac-train-state"};
    if (rc == ZY_OK) rc = safetensors_write(path, items, n, meta, 1);
    free(items);
    const char *text = rc == ZY_OK ? "" : zy_errmsg();
    marker_name(j->rank, rc == ZY_OK, name, sizeof name);
    staging_file(j, name, path, sizeof path);
    if (zy_write_file_atomic(path, text, strlen(text)) != ZY_OK && rc == ZY_OK) rc = ZY_ERR;
    return rc;
}

/* Rank 0: waits for every other rank's marker (a failed one, or none within the deadline, fails
 * the save). */
static int wait_for_shards(trainer_save *j) {
    const double deadline = zy_now() + j->timeout_s;
    for (int r = 1; r < j->world; r++) {
        char done[ZY_PATH_MAX + 512], failed[ZY_PATH_MAX + 512], name[64];
        marker_name(r, 1, name, sizeof name);
        staging_file(j, name, done, sizeof done);
        marker_name(r, 0, name, sizeof name);
        staging_file(j, name, failed, sizeof failed);
        while (!zy_path_exists(done)) {
            if (zy_path_exists(failed)) {
                char *why = NULL;
                zy_read_file(failed, &why, NULL);
                int rc = zy_fail_runtime("rank %d could not write its shard: %s", r,
                                         why ? why : "(no reason recorded)");
                free(why);
                return rc;
            }
            if (zy_now() > deadline)
                return zy_fail_runtime("rank %d wrote no shard within %g s", r, j->timeout_s);
            if (__atomic_load_n(&j->cancel, __ATOMIC_ACQUIRE))
                return zy_fail_runtime("the run ended before rank %d wrote its shard", r);
            struct timespec ts = {0, 5 * 1000000L};
            nanosleep(&ts, NULL);
        }
    }
    return ZY_OK;
}

/* The other ranks' files: where they were staged and their names in the folder. */
static int other_files(const trainer_save *j, char ***src, char ***dst) {
    int n = 0;
    *src = zy_calloc(2 * (size_t)j->world + 1, sizeof **src);
    *dst = zy_calloc(2 * (size_t)j->world + 1, sizeof **dst);
    for (int r = 1; r < j->world; r++)
        for (int k = 0; k < 2; k++) {
            char name[128];
            if (k == 0 && j->bound[r] == j->bound[r + 1]) continue; /* owns no weights */
            if (k == 0)
                model_name(j, r, name, sizeof name);
            else
                state_name(r, name, sizeof name);
            (*src)[n] = zy_malloc(ZY_PATH_MAX + 512);
            staging_file(j, name, (*src)[n], ZY_PATH_MAX + 512);
            (*dst)[n] = zy_malloc(160);
            snprintf((*dst)[n], 160, "%s/%s", k == 0 ? "model" : "train", name);
            n++;
        }
    return n;
}

/* model.safetensors.index.json: each tensor in the file of the rank that owns it. */
static char *model_index(const trainer_save *j) {
    if (j->world == 1) return NULL;
    char **files = zy_calloc((size_t)j->world, sizeof *files);
    int *shard_of = zy_calloc((size_t)j->table->count + 1, sizeof *shard_of);
    for (int r = 0; r < j->world; r++) {
        files[r] = zy_malloc(64);
        model_name(j, r, files[r], 64);
        for (int i = j->bound[r]; i < j->bound[r + 1]; i++) shard_of[i] = r;
    }
    char *text = hf_index_json(j->table, ZY_ST_F32, shard_of, (const char *const *)files);
    for (int r = 0; r < j->world; r++) free(files[r]);
    free(files);
    free(shard_of);
    return text;
}

/* Rank 0: the folder, with the other ranks' files moved in. */
static int write_folder(trainer_save *j) {
    ZY_TRY(injected_failure(j->step, 0));
    int n, rc = wait_for_shards(j);
    zy_st_write_item *items = state_items(j, &n);
    char **src, **dst, model_file[64];
    const int n_other = other_files(j, &src, &dst);
    char *index = model_index(j);
    model_name(j, 0, model_file, sizeof model_file);
    zy_param_table own = owned_table(j);
    zy_ckpt_content c = {.config = &j->config,
                         .table = &own,
                         .params = j->params,
                         .first = 0,
                         .last = own.count,
                         .model_file = model_file,
                         .model_index = index,
                         .state = items,
                         .n_state = n,
                         .state_json = j->state_json,
                         .tokenizer_path = j->tokenizer[0] ? j->tokenizer : NULL,
                         .extra_files = (const char *const *)src,
                         .extra_names = (const char *const *)dst,
                         .n_extra = n_other};
    if (rc == ZY_OK) rc = ckpt_save(j->root, j->step, &c, j->keep, j->dir, sizeof j->dir);
    if (rc == ZY_OK) fault_checkpoint_written(j->dir, j->step);
    if (j->world > 1) { /* the markers and anything a failed save left */
        char staging[ZY_PATH_MAX + 512];
        staging_dir(j, staging, sizeof staging);
        zy_remove_tree(staging);
    }
    for (int i = 0; i < n_other; i++) free(src[i]), free(dst[i]);
    free(src);
    free(dst);
    free(index);
    free(own.items);
    free(items);
    return rc;
}

static void *writer_main(void *arg) {
    trainer_save *j = arg;
    const double t0 = zy_now();
    j->rc = j->rank > 0 ? write_shard(j) : write_folder(j);
    if (j->rc != ZY_OK) snprintf(j->err, sizeof j->err, "%s", zy_errmsg());
    j->write_s = zy_now() - t0;
    return NULL;
}

static void job_free(trainer_save *j) {
    free(j->bound);
    free(j->so);
    free(j->sb);
    free(j->state_json);
    memset(j, 0, sizeof *j);
}

/* Copies the named tensors' values into buf (advanced past them) and points them there. */
static void copy_tensors(zy_state_tensor *st, int n, float **buf) {
    for (int i = 0; i < n; i++) {
        memcpy(*buf, st[i].data, st[i].numel * sizeof(float));
        st[i].data = *buf;
        *buf += st[i].numel;
    }
}

static size_t floats_of(const zy_state_tensor *st, int n) {
    size_t f = 0;
    for (int i = 0; i < n; i++) f += st[i].numel;
    return f;
}

static char *state_json(const trainer *tr) {
    cJSON *st = cJSON_CreateObject();
    cJSON_AddNumberToObject(st, "step", (double)tr->st.step);
    cJSON_AddNumberToObject(st, "optimizer_step", (double)tr->st.opt.step);
    cJSON_AddNumberToObject(st, "balance_step", (double)tr->st.bal.step);
    cJSON_AddNumberToObject(st, "tokens_seen", tr->tokens_seen);
    cJSON_AddNumberToObject(st, "seed", (double)tr->cfg->seed);
    char *loader = batches_state_json(tr->train);
    cJSON_AddItemToObject(st, "train_loader", cJSON_Parse(loader));
    free(loader);
    trainer_phases_save(tr, st); /* the phase and each source's position (phases.c) */
    char *json = cJSON_Print(st);
    cJSON_Delete(st);
    return json;
}

/* The host copy's layout (trainer.h's params_host): the owned entries' block, then the other
 * entries every rank keeps, packed (the same on CPU and GPU ranks: one path, which the CPU ranks'
 * tests cover). */
static void host_layout(trainer *tr) {
    const zy_model *m = &tr->st.model;
    const zy_param_table *t = &m->table;
    int first, last;
    step_owned(&tr->st, &first, &last);
    tr->host_at = zy_calloc((size_t)t->count + 1, sizeof *tr->host_at);
    const size_t lo = first < last ? t->items[first].offset : 0;
    size_t at = first < last ? t->items[last - 1].offset + t->items[last - 1].numel - lo : 0;
    for (int i = 0; i < t->count; i++) {
        const int own = i >= first && i < last;
        if (own) {
            tr->host_at[i] = t->items[i].offset - lo;
        } else if (step_master_everywhere(&tr->st, i)) {
            tr->host_at[i] = at;
            at += t->items[i].numel;
        } else {
            tr->host_at[i] = SIZE_MAX;
        }
    }
    tr->params_host_floats = at;
}

void trainer_snapshot_init(trainer *tr) {
    zy_model *m = &tr->st.model;
    if (!tr->host_at) host_layout(tr);
    if (!tr->params_host)
        tr->params_host = ops_host_alloc(m->ctx, (tr->params_host_floats + 1) * sizeof(float));
    optim_state_mirror(&tr->st.opt);
}

/* The training thread's part: what this rank writes, copied out of the live state into the
 * trainer's host buffers (trainer.h). On a GPU the copies are queued on the stream into pinned
 * memory with one wait at the end, so the pause is the device-to-host transfer. */
static int snapshot(trainer *tr, trainer_save *j) {
    zy_model *m = &tr->st.model;
    memset(j, 0, sizeof *j);
    j->step = tr->st.step;
    j->rank = tr->ranks.comm.rank;
    j->world = tr->ranks.comm.world;
    j->timeout_s = tr->cfg->dist_timeout_s;
    j->keep = tr->cfg->keep_checkpoints;
    j->table = &m->table;
    j->config = m->cfg;
    snprintf(j->root, sizeof j->root, "%s", tr->ckpt_root);
    snprintf(j->tokenizer, sizeof j->tokenizer, "%s", tr->cfg->tokenizer);
    /* the weights this rank owns (every rank's range: rank 0 writes the index) */
    j->bound = zy_calloc((size_t)j->world + 1, sizeof *j->bound);
    for (int r = 0; r <= j->world; r++)
        j->bound[r] = tr->st.have_zero ? tr->st.zero.bound[r] : (r ? m->table.count : 0);
    step_owned(&tr->st, &j->first, &j->last);
    trainer_snapshot_init(tr);
    if (j->world > 1) {
        ZY_TRY(step_weights_ready(&tr->st)); /* nothing still arriving */
        ZY_TRY(step_state_whole(&tr->st));   /* split entries' moments, for their owner */
    }
    /* the owned block in one copy, then the other entries every rank keeps (the replica check
     * reads them) */
    const zy_param_table *t = &m->table;
    if (j->last > j->first) {
        const zy_param *a = &t->items[j->first], *b = &t->items[j->last - 1];
        const size_t n = b->offset + b->numel - a->offset;
        ops_copy_async(m->ctx, tr->params_host, m->params + a->offset, n * sizeof(float));
        j->params = tr->params_host;
        j->bytes += (double)n * sizeof(float);
    }
    for (int i = 0; j->world > 1 && i < t->count; i++)
        if (tr->host_at[i] != SIZE_MAX && (i < j->first || i >= j->last))
            ops_copy_async(m->ctx, tr->params_host + tr->host_at[i], m->params + t->items[i].offset,
                           t->items[i].numel * sizeof(float));
    optim_state_to_host(&tr->st.opt); /* waits for its copies (on the update's context) */
    ops_sync(m->ctx);                 /* and for the weights' */
    if (j->world > 1) {
        const float **at = zy_calloc((size_t)t->count + 1, sizeof *at);
        for (int i = 0; i < t->count; i++)
            at[i] = tr->host_at[i] != SIZE_MAX ? tr->params_host + tr->host_at[i] : NULL;
        const int rc = trainer_check_replicas(tr, at);
        free(at);
        ZY_TRY(rc);
    }
    /* the state: the GPU's optimizer moments stay in the mirror they were copied to; what a step
     * changes in place on the host (the CPU's moments, the balancing state) is copied */
    /* of its own entries (a replicated one's state, the same on every rank once a split one's is
     * gathered, is its owner's) */
    j->so = optim_state_tensors_of(&tr->st.opt, &m->table, j->first, j->last, &j->no);
    if (j->rank == 0) j->sb = balance_state_tensors(&tr->st.bal, &j->nb);
    const int copy_so = !optim_state_mirrored(&tr->st.opt);
    const size_t floats = (copy_so ? floats_of(j->so, j->no) : 0) + floats_of(j->sb, j->nb);
    if (floats > tr->state_floats) {
        free(tr->state_copy);
        tr->state_copy = zy_malloc(floats * sizeof(float));
        tr->state_floats = floats;
    }
    float *buf = tr->state_copy;
    if (copy_so) copy_tensors(j->so, j->no, &buf);
    copy_tensors(j->sb, j->nb, &buf);
    j->bytes += (double)(floats_of(j->so, j->no) + floats_of(j->sb, j->nb)) * sizeof(float);
    if (j->rank == 0) j->state_json = state_json(tr);
    return ZY_OK;
}

void trainer_drop_checkpoint(trainer *tr) {
    /* rank 0's writer may be waiting for a rank that died: it gives up (nothing is committed) */
    __atomic_store_n(&tr->save.cancel, 1, __ATOMIC_RELEASE);
    if (tr->save.active) pthread_join(tr->save.thread, NULL);
    job_free(&tr->save);
}

/* Rank 0: the console line and the metrics row of a finished save (every rank's numbers:
 * v = {the slowest pause, wait and write, the bytes of all}). */
static void report(trainer *tr, const trainer_save *j, const double v[4]) {
    const double gbps = v[2] > 0 ? v[3] / 1e9 / v[2] : 0;
    char wait[64] = "";
    if (v[1] >= 0.0005) snprintf(wait, sizeof wait, " (%.3f s of it waiting for the write)", v[1]);
    printf("checkpoint step %lld: stall %.3f s%s, %.3f GB written in %.2f s (%.2f GB/s)%s -> %s",
           j->step, v[0], wait, v[3] / 1e9, v[2], gbps,
           tr->cfg->checkpoint_async ? " in the background" : "", j->dir);
    if (j->world > 1) printf(" (weights identical on all %d ranks)", j->world);
    printf("\n");
    if (!tr->metrics) return;
    metrics_scalar(tr->metrics, "checkpoint_stall_s", j->step, v[0]);
    metrics_scalar(tr->metrics, "checkpoint_wait_s", j->step, v[1]);
    metrics_scalar(tr->metrics, "checkpoint_write_s", j->step, v[2]);
    metrics_scalar(tr->metrics, "checkpoint_bytes", j->step, v[3]);
    metrics_scalar(tr->metrics, "checkpoint_gb_per_s", j->step, gbps);
    metrics_scalar(tr->metrics, "world_size", j->step, j->world); /* the ranks that wrote it */
}

/* Joins the writer; training_waits: the step loop waits for it (the next save came first, or
 * saves are synchronous), so the wait is part of the stall (not at the end of the run). */
static int finish(trainer *tr, int training_waits) {
    trainer_save *j = &tr->save;
    if (!j->active) return ZY_OK;
    const double t0 = zy_now();
    const int running = pthread_tryjoin_np(j->thread, NULL) != 0;
    if (running) {
        if (trainer_is_main(tr) && tr->cfg->checkpoint_async)
            printf("waiting for checkpoint step %lld to be written\n", j->step);
        pthread_join(j->thread, NULL);
    }
    /* synchronous: the whole save is the wait; in the background only a write still going */
    if (training_waits && (running || !tr->cfg->checkpoint_async)) j->wait_s = zy_now() - t0;
    j->active = 0;
    j->stall_s += j->wait_s;
    /* every rank's outcome (a rank that failed says why on its stderr, the others name it) and
     * its numbers: v = {failed, pause, wait, write} (the largest), then the bytes (summed) */
    double v[5] = {j->rc != ZY_OK, j->stall_s, j->wait_s, j->write_s, j->bytes};
    int rc = comm_all_reduce(&tr->ranks.comm, v, 4, ZY_COMM_F64, ZY_COMM_MAX);
    if (rc == ZY_OK) rc = comm_all_reduce(&tr->ranks.comm, v + 4, 1, ZY_COMM_F64, ZY_COMM_SUM);
    if (rc == ZY_OK && j->rc != ZY_OK)
        rc = zy_fail_runtime("checkpoint step %lld: %s", j->step, j->err);
    else if (rc == ZY_OK && v[0] != 0)
        rc =
            zy_fail_runtime("checkpoint step %lld: another rank failed to write its part", j->step);
    if (rc == ZY_OK && trainer_is_main(tr)) report(tr, j, v + 1);
    job_free(j);
    return rc;
}

int trainer_finish_checkpoint(trainer *tr) {
    return finish(tr, 0);
}

int trainer_save_checkpoint(trainer *tr) {
    /* ZeRO-1's weights still arriving from the last step: the collectives below come after them
     * (the wait is this save's: the next forward would have overlapped it) */
    const double t0 = zy_now();
    ZY_TRY(step_weights_ready(&tr->st));
    const double ready_s = zy_now() - t0;
    /* at most one save in flight: the previous one ends first (reported if it failed: this one
     * is attempted anyway) */
    if (tr->save.active && finish(tr, 1) != ZY_OK)
        fprintf(stderr, "warning: %s; saving step %lld next\n", zy_errmsg(),
                (long long)tr->st.step);
    const double t1 = zy_now();
    trainer_save *j = &tr->save;
    if (snapshot(tr, j) != ZY_OK) {
        job_free(j);
        return ZY_ERR;
    }
    j->stall_s = ready_s + zy_now() - t1;
    if (pthread_create(&j->thread, NULL, writer_main, j) != 0) {
        job_free(j);
        return zy_fail_runtime("cannot start the checkpoint writer: %s", strerror(errno));
    }
    j->active = 1;
    return tr->cfg->checkpoint_async ? ZY_OK : finish(tr, 1);
}
