/* The training loop (see train.h) around the one training step (train/step.h): the schedule, the
 * data, metrics, validation, samples and checkpoints. Every quantity that decides the next step
 * (weights, moments, step counters, balancing state, data position) is in the checkpoint, so a
 * resumed run continues bit for bit. */
#include "train/train.h"
#include "base/err.h"
#include "base/fileio.h"
#include "base/timer.h"
#include "data/tokenizer.h"
#include "io/checkpoint.h"
#include "io/hf_model.h"
#include "model/generate.h"
#include "model/model.h"
#include "train/batches.h"
#include "train/fault.h"
#include "train/heartbeat.h"
#include "train/memory.h"
#include "train/skip.h"
#include "train/metrics.h"
#include "dist/env.h"
#include "train/step.h"
#include "train/trainer.h"

#include <errno.h>
#include <math.h>
#include <omp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

/* the trainer's state: train/trainer.h */

/* device "auto" takes a GPU when one is visible, else the CPU; "cuda" insists on a GPU. A rank
 * takes the GPU of its local rank; CPU ranks on one host share its cores (threads: the cores over
 * the ranks of the host unless the config sets them). */
static int setup_device(trainer *tr, const dist_env *e) {
    const char *dev = tr->cfg->device;
    const int local = ranks_local_gpu(e);
    if (!strcmp(dev, "cuda") || (!strcmp(dev, "auto") && ops_cuda_device_count() > 0)) {
        zy_cuda_opts o = tr->cfg->cuda;
        o.overlap_optimizer = step_overlaps(o.overlap_optimizer, e->world);
        return ops_ctx_init_cuda_opts(&tr->ctx, local, &o);
    }
    int threads = tr->cfg->threads;
    if (threads == 0 && e->world > 1) {
        const int per_host = e->local_world > 0 ? e->local_world : e->world;
        threads = omp_get_num_procs() / per_host > 0 ? omp_get_num_procs() / per_host : 1;
    }
    if (threads > 0) omp_set_num_threads(threads);
    ops_ctx_init_cpu(&tr->ctx, omp_get_max_threads());
    return ZY_OK;
}

/* The communicator of the launcher's ranks (train/ranks.h). */
static int setup_comm(trainer *tr, const dist_env *e) {
    ZY_TRY(ranks_connect(&tr->ranks, e, &tr->ctx, tr->cfg->dist_timeout_s));
    step_set_comm(&tr->st, &tr->ranks.comm);
    return ZY_OK;
}

/* The console line of ZeRO-1's optimizer memory (optim_bytes): every rank's, summed and the
 * largest (collective), and who updates the embedding (dist.embedding_update). */
static int report_zero1(trainer *tr) {
    const zy_optim *o = &tr->st.opt;
    const double mib = 1024.0 * 1024.0;
    double bytes[2];
    bytes[0] = bytes[1] = optim_bytes(o);
    ZY_TRY(comm_all_reduce(&tr->ranks.comm, bytes, 1, ZY_COMM_F64, ZY_COMM_SUM));
    ZY_TRY(comm_all_reduce(&tr->ranks.comm, bytes + 1, 1, ZY_COMM_F64, ZY_COMM_MAX));
    printf("ZeRO-1 over %d ranks: optimizer %.3f MiB in all, %.3f MiB on the largest rank; "
           "the embedding updated by %s\n",
           tr->ranks.comm.world, bytes[0] / mib, bytes[1] / mib,
           o->cfg.embedding_update == ZY_EMB_REPLICATED ? "every rank"
           : o->cfg.embedding_update == ZY_EMB_SPLIT    ? "every rank, a slice each"
                                                        : "its owner");
    return ZY_OK;
}

static int is_main_rank(const trainer *tr) {
    return tr->ranks.comm.rank == 0;
}

/* Bad input: data whose token ids the model's embedding does not have, or that another tokenizer
 * wrote than the run's (its own, or the one beside the weights it starts from). */
static int check_data_fits(const trainer *tr, const zy_batches *b, const char *split,
                           const char *model_dir) {
    const zy_train_config *c = tr->cfg;
    ZY_TRY(batches_check_vocab(b, split, tr->st.model.cfg.vocab_size, c->model_desc));
    if (c->tokenizer[0]) ZY_TRY(batches_check_tokenizer(b, c->tokenizer, "tokenizer"));
    char path[4096];
    if (model_dir && zy_path_join(path, sizeof path, model_dir, "tokenizer.json") == ZY_OK &&
        zy_path_exists(path))
        ZY_TRY(batches_check_tokenizer(b, path, "the model's tokenizer"));
    return ZY_OK;
}

/* Mean loss over the first `batches` validation batches (the same batches every time). */
static int evaluate(trainer *tr, int64_t batches, double *loss, int64_t *tokens) {
    const zy_train_config *c = tr->cfg;
    ZY_TRY(step_weights_ready(&tr->st)); /* for the samples after it too, which decode */
    batches_close(tr->val);
    tr->val = NULL;
    ZY_TRY(batches_open(&tr->val, c, 1, c->seed + 1000003));
    ZY_TRY(batches_set_slice(tr->val, tr->ranks.comm.rank, tr->ranks.comm.world));
    ZY_TRY(batches_check_vocab(tr->val, "validation", tr->st.model.cfg.vocab_size, c->model_desc));
    double sum = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < batches; i++) {
        ZY_TRY(batches_next(tr->val, tr->st.ids, tr->st.targets));
        sum += model_forward(&tr->st.model, &tr->st.acts, tr->st.ids, tr->st.targets);
        count += tr->st.acts.count;
    }
    if (tr->ranks.comm.world > 1) { /* every rank read its rows of the same batches */
        ZY_TRY(comm_all_reduce(&tr->ranks.comm, &sum, 1, ZY_COMM_F64, ZY_COMM_SUM));
        ZY_TRY(comm_all_reduce(&tr->ranks.comm, &count, 1, ZY_COMM_I64, ZY_COMM_SUM));
    }
    *loss = count ? sum / (double)count : NAN;
    if (tokens) *tokens = count;
    return ZY_OK;
}

/* What a step cost: model FLOP rate, MFU, memory and the expert load (as `bench train` reports
 * them), for the console line and the metrics. */
typedef struct {
    double model_tflops; /* model_train_flops_per_token x tokens/s (every rank's) / 1e12 */
    double mfu;          /* model_tflops / (mfu_peak_tflops x ranks); NaN when no peak is set */
    double mem_gib;      /* CUDA: the device's memory in use; CPU: this process's peak resident */
    double load, load_worst; /* busiest expert / mean: over the layers, the worst layer's */
} step_cost;

static step_cost measure_step(trainer *tr, double tok_s) {
    const zy_train_config *c = tr->cfg;
    const zy_config *mc = &tr->st.model.cfg;
    step_cost k;
    k.model_tflops = model_train_flops_per_token(mc, c->seq_len) * tok_s / 1e12;
    k.mfu = c->mfu_peak_tflops > 0
                ? k.model_tflops / ((double)c->mfu_peak_tflops * tr->ranks.comm.world)
                : NAN;
    size_t used = 0, total = 0;
    if (tr->ctx.device == ZY_DEV_CUDA) {
        k.mem_gib = ops_device_mem(&tr->ctx, &used, &total) == ZY_OK ? used / 1073741824.0 : NAN;
    } else {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        k.mem_gib = (double)ru.ru_maxrss * 1024.0 / 1073741824.0; /* Linux: kilobytes */
    }
    k.load = balance_load_ratio(tr->st.step_counts, mc->num_hidden_layers, mc->num_experts,
                                &k.load_worst);
    return k;
}

static void log_step(trainer *tr, double loss, double gnorm, float lr, double tok_s,
                     const step_cost *k) {
    const zy_config *mc = &tr->st.model.cfg;
    const int E = mc->num_experts, E1 = E + 1;
    zy_metrics *m = tr->metrics;
    metrics_scalar(m, "loss", tr->st.step, loss);
    metrics_scalar(m, "grad_norm", tr->st.step, gnorm);
    metrics_scalar(m, "lr", tr->st.step, lr);
    metrics_scalar(m, "tokens_per_s", tr->st.step, tok_s);
    metrics_scalar(m, "tokens_seen", tr->st.step, tr->tokens_seen);
    metrics_scalar(m, "world_size", tr->st.step, tr->ranks.comm.world);
    if (tr->phases.phased) metrics_scalar(m, "phase", tr->st.step, tr->phases.current);
    metrics_scalar(m, "model_tflops", tr->st.step, k->model_tflops);
    if (isfinite(k->mfu)) metrics_scalar(m, "mfu", tr->st.step, k->mfu);
    metrics_scalar(m, "mem_gib", tr->st.step, k->mem_gib);
    metrics_scalar(m, "expert_load", tr->st.step, k->load);
    metrics_scalar(m, "expert_load_worst", tr->st.step, k->load_worst);
    for (int l = 0; l < mc->num_hidden_layers; l++) {
        zy_load_summary s;
        balance_load_summary(tr->st.step_counts + (size_t)l * E1, E, &s);
        char tag[96];
#define TAG(name, value)                                                                           \
    snprintf(tag, sizeof tag, "router/layer%02d/" name, l);                                        \
    metrics_scalar(m, tag, tr->st.step, value)
        TAG("expert_max_frac", s.max_frac);
        TAG("expert_min_frac", s.min_frac);
        TAG("skip_frac", s.skip_frac);
        TAG("entropy", s.entropy);
        TAG("busiest_over_mean", s.max_over_mean > 0 ? s.max_over_mean : 1.0);
#undef TAG
    }
}

/* The most unbalanced layer of the last step (largest expert fraction), for the console. */
static zy_load_summary router_worst_layer(const trainer *tr) {
    const zy_config *mc = &tr->st.model.cfg;
    const int E1 = mc->num_experts + 1;
    zy_load_summary worst = {0};
    for (int l = 0; l < mc->num_hidden_layers; l++) {
        zy_load_summary s;
        balance_load_summary(tr->st.step_counts + (size_t)l * E1, mc->num_experts, &s);
        if (l == 0 || s.max_frac > worst.max_frac) worst = s;
    }
    return worst;
}

/* Samples of the prompts (rank 0 only: the others' stdout goes nowhere); the sampling seeds are
 * fixed, so the samples of successive validations show what the training changed. */
static void print_samples(trainer *tr) {
    const zy_train_config *c = tr->cfg;
    if (!c->tokenizer[0] || c->n_prompts == 0 || !is_main_rank(tr)) return;
    zy_tokenizer *tok;
    if (tok_load(&tok, c->tokenizer) != ZY_OK) {
        printf("samples skipped: %s\n", zy_errmsg());
        return;
    }
    printf("samples at step %lld (temperature %.2f, top-p %.2f):\n", (long long)tr->st.step,
           c->sample_temperature, c->sample_top_p);
    for (int i = 0; i < c->n_prompts; i++) {
        zy_ids ids = {0};
        if (tok_encode(tok, c->prompts[i], strlen(c->prompts[i]), 0, &ids) != ZY_OK || ids.n == 0)
            continue;
        int32_t *out = zy_malloc((ids.n + (size_t)c->sample_tokens) * sizeof *out);
        zy_sampling s = {0, c->sample_temperature, c->sample_top_p, c->seed + (uint64_t)i};
        int n = 0;
        if (model_generate(&tr->st.model, ids.data, (int)ids.n, c->sample_tokens, &s, 1, out, &n) ==
            ZY_OK) {
            char *text = NULL;
            size_t len = 0;
            if (tok_decode(tok, out, (size_t)n, 0, &text, &len) == ZY_OK) {
                printf("--- %s\n%.*s\n", c->prompts[i], (int)len, text);
                free(text);
            }
        }
        free(out);
        ids_free(&ids);
    }
    tok_free(tok);
}

/* Every phase's micro-batch must fit the device (a later phase's longer context fails here, not
 * hours in). Under cuda.attention_workspace_gib = auto the attention workspace cap then grows to
 * the one-pass need of the longest phase when the largest job leaves room for it. */
static int check_memory(trainer *tr, const zy_config *mc, const dist_env *e) {
    const zy_phases *ph = &tr->phases;
    zy_mem_need most = {0};
    size_t want = 0;
    for (int p = 0; p < ph->n; p++) {
        const zy_train_config *v = &ph->views[p];
        if (v->batch_size % e->world) continue; /* refused by trainer_phases_check */
        const int B = v->batch_size / e->world;
        char what[ZY_PATH_MAX + 160], which[32] = "";
        if (ph->phased) snprintf(which, sizeof which, " (phases[%d])", p);
        snprintf(what, sizeof what, "training model %s with batch %d x %d%s", v->model_desc, B,
                 v->seq_len, which);
        zy_mem_need n;
        ZY_TRY(mem_check(&tr->ctx, mc, B, v->seq_len, v->recompute, &v->optim, e->world,
                         e->local_world > 0 ? e->local_world : e->world, what, &n));
        if (n.device > most.device) most = n;
        const size_t w = mem_workspace_wanted(&tr->ctx, mc, B, v->seq_len);
        if (w > want) want = w;
    }
    mem_grow_workspace(&tr->ctx, &most, want);
    return ZY_OK;
}

static int trainer_init(trainer *tr, const zy_train_config *c) {
    memset(tr, 0, sizeof *tr);
    phases_init(&tr->phases, c);
    c = tr->cfg = &tr->phases.views[0]; /* the first phase (the run itself without phases) */
    dist_env e;
    ZY_TRY(dist_env_from_environ(&e));
    if (c->batch_size % e.world)
        return zy_fail("batch_size %d (the global batch) cannot be split over %d ranks: make it "
                       "a multiple of %d",
                       c->batch_size, e.world, e.world);
    ZY_TRY(setup_device(tr, &e));
    zy_config mc = c->model;
    if (c->tokenizer[0]) { /* the model's special ids follow the tokenizer it is trained with */
        zy_tokenizer *tok;
        ZY_TRY(tok_load(&tok, c->tokenizer));
        int32_t nv = tok_vocab_size(tok);
        mc.bos_token_id = tok_bos_id(tok);
        if (!config_is_eos(&mc, tok_eos_id(tok))) /* a list holding it stays whole */
            config_set_eos(&mc, tok_eos_id(tok));
        mc.pad_token_id = tok_pad_id(tok);
        tok_free(tok);
        if (nv > mc.vocab_size)
            return zy_fail("%s has %d ids but the model's vocab_size is %d", c->tokenizer, nv,
                           mc.vocab_size);
    }
    ZY_TRY(check_memory(tr, &mc, &e));
    ZY_TRY(step_init_model(&tr->st, &tr->ctx, &mc, c->batch_size / e.world, c->seq_len, 1));
    ZY_TRY(setup_comm(tr, &e));
    ZY_TRY(trainer_phases_check(tr));
    if (c->init_from[0])
        ZY_TRY(hf_load_model(&tr->st.model, c->init_from, ZY_SKIP_BIAS_HF));
    else
        model_init_weights(&tr->st.model, c->seed);
    ZY_TRY(step_init_acts(&tr->st, c->recompute));
    zy_step_config sc = {.grad_accum = c->grad_accum,
                         .grad_clip = c->grad_clip,
                         .balance = c->balance_enabled,
                         .stop_on_nonfinite = 1,
                         .spike = c->spike,
                         .overlap_optimizer = c->cuda.overlap_optimizer};
    ZY_TRY(step_init_training(&tr->st, &sc, &c->optim, &c->balance));
    trainer_snapshot_init(tr);
    ZY_TRY(batches_open(&tr->train, c, 0, c->seed));
    ZY_TRY(batches_set_slice(tr->train, tr->ranks.comm.rank, tr->ranks.comm.world));
    const char *from = c->init_from[0] ? c->init_from : NULL;
    ZY_TRY(check_data_fits(tr, tr->train, "training", from));
    if (c->eval_interval > 0) { /* the validation data too, before any step */
        ZY_TRY(batches_open(&tr->val, c, 1, c->seed + 1000003));
        ZY_TRY(check_data_fits(tr, tr->val, "validation", from));
        struct stat st; /* a file source (a shard, a Megatron .idx) has no held-out split */
        for (int i = 0; i < c->n_sources && is_main_rank(tr); i++)
            if (stat(c->sources[i].path, &st) == 0 && !S_ISDIR(st.st_mode))
                fprintf(stderr,
                        "warning: data %s is a file, not a prepared folder: the validation loss "
                        "reads its training tokens\n",
                        c->sources[i].path);
    }
    snprintf(tr->ckpt_root, sizeof tr->ckpt_root, "%s/checkpoints", c->out_dir);
    return ZY_OK;
}

static void trainer_free(trainer *tr) {
    trainer_drop_checkpoint(tr); /* a writer still running (the run failed) ends first */
    if (tr->metrics) metrics_close(tr->metrics);
    batches_close(tr->train);
    batches_close(tr->val);
    step_free(&tr->st);
    ops_host_free(&tr->ctx, tr->params_host);
    free(tr->host_at);
    free(tr->state_copy);
    ranks_free(&tr->ranks);
    ops_ctx_free(&tr->ctx);
    phases_free(&tr->phases);
}

/* SIGTERM/SIGINT (a preemption, Ctrl-C) ask the loop to stop after the current step with a
 * checkpoint; a second signal acts as if none were caught (SA_RESETHAND). */
static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int sig) {
    stop_signal = sig;
}

static void stop_signals_catch(struct sigaction old[2]) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_stop_signal;
    sa.sa_flags = SA_RESETHAND;
    sigemptyset(&sa.sa_mask);
    stop_signal = 0;
    sigaction(SIGTERM, &sa, &old[0]);
    sigaction(SIGINT, &sa, &old[1]);
}

static void stop_signals_restore(const struct sigaction old[2]) {
    sigaction(SIGTERM, &old[0], NULL);
    sigaction(SIGINT, &old[1], NULL);
}

/* The step's batch source: the next micro-batch of the training split. */
static int64_t read_stop_signal(void *user) {
    (void)user;
    return stop_signal;
}

static int next_train_batch(void *user, int32_t *ids, int32_t *targets) {
    return batches_next(((trainer *)user)->train, ids, targets);
}

/* A fresh run may not mix with an earlier one in the same out_dir (its checkpoints would be
 * pruned among the new ones, --resume would pick the wrong run): it needs --overwrite, which
 * removes the old checkpoints (each renamed aside first) and metrics. Rank 0 decides (before any
 * rank writes there) and the others follow. */
static int claim_out_dir_rank0(trainer *tr, int overwrite) {
    long long newest;
    char metrics[4096];
    ZY_TRY(zy_path_join(metrics, sizeof metrics, tr->cfg->out_dir, "metrics.jsonl"));
    const int n = ckpt_list(tr->ckpt_root, &newest), has_metrics = zy_path_exists(metrics);
    if (n == 0 && !has_metrics) return ZY_OK;
    char what[128];
    if (n > 0)
        snprintf(what, sizeof what, "%d checkpoint%s (newest: step %lld)", n, n == 1 ? "" : "s",
                 newest);
    else
        snprintf(what, sizeof what, "metrics.jsonl");
    if (!overwrite)
        return zy_fail("%s holds a run (%s): --resume continues it, --overwrite starts over "
                       "(removing it)",
                       tr->cfg->out_dir, what);
    printf("--overwrite: removing the run in %s (%s)\n", tr->cfg->out_dir, what);
    ZY_TRY(ckpt_remove_all(tr->ckpt_root));
    if (has_metrics && remove(metrics) != 0) return zy_fail_errno(metrics, "cannot remove", errno);
    return ZY_OK;
}

static int claim_out_dir(trainer *tr, int overwrite) {
    int rc = is_main_rank(tr) ? claim_out_dir_rank0(tr, overwrite) : ZY_OK;
    if (tr->ranks.comm.world == 1) return rc;
    int64_t refused = rc != ZY_OK;
    ZY_TRY(comm_all_reduce(&tr->ranks.comm, &refused, 1, ZY_COMM_I64, ZY_COMM_MAX));
    if (refused && rc == ZY_OK)
        return zy_fail("%s: rank 0 refused a fresh run there (its message says why)",
                       tr->cfg->out_dir);
    return rc;
}

/* --resume where checkpoints exist but none verifies: starting afresh would silently throw the
 * run away, so it is an error listing why each was refused. */
static int none_verifies(const char *root, const zy_ckpt_found *f) {
    char why[2600] = "";
    size_t k = 0;
    for (int i = 0; i < f->n_skipped && i < 4 && k < sizeof why; i++)
        k += (size_t)snprintf(why + k, sizeof why - k, "\n  %s", f->skipped[i]);
    if (f->n_skipped > 4 && k < sizeof why)
        snprintf(why + k, sizeof why - k, "\n  (and %d more)", f->n_skipped - 4);
    return zy_fail("--resume: none of the %d checkpoints under %s verifies (--overwrite starts "
                   "over):%s",
                   f->n_skipped, root, why);
}

/* --resume with a config that differs from the one the run saved (out_dir/train_config.json):
 * each changed key, old and new value, on the console (what cannot be continued is refused when
 * the checkpoint is read). */
static void report_config_changes(const char *out_dir, const char *config_json) {
    char path[4096], *old = NULL;
    if (!config_json || zy_path_join(path, sizeof path, out_dir, "train_config.json") != ZY_OK ||
        !zy_path_exists(path) || zy_read_file(path, &old, NULL) != ZY_OK)
        return;
    static char diff[8192];
    const int n = train_config_diff(old, config_json, diff, sizeof diff);
    if (n > 0)
        printf("resume: the config differs from %s in %d key%s:\n%s", path, n, n == 1 ? "" : "s",
               diff);
    free(old);
}

int train_run(const zy_train_config *c, const zy_train_opts *o) {
    /* transformers applies attention_dropout while training; zayac has no dropout, so a config
     * asking for it would train a different model than it says */
    if (c->model.attention_dropout != 0)
        return zy_fail(
            "model (%s): attention_dropout = %g: zayac trains without attention dropout; "
            "set it to 0.0",
            c->model_desc, c->model.attention_dropout);
    trainer tr;
    int rc = trainer_init(&tr, c);
    if (rc == ZY_OK && !o->resume) rc = claim_out_dir(&tr, o->overwrite);
    if (rc == ZY_OK && o->resume && is_main_rank(&tr))
        report_config_changes(c->out_dir, o->config_json);
    if (rc == ZY_OK && o->resume) {
        zy_ckpt_found found;
        rc = ckpt_find_latest(tr.ckpt_root, &found);
        for (int i = 0; rc == ZY_OK && i < found.n_skipped && i < 4; i++)
            printf("resume: skipping a corrupt checkpoint: %s\n", found.skipped[i]);
        if (rc == ZY_OK && !found.dir[0] && found.n_skipped > 0)
            rc = none_verifies(tr.ckpt_root, &found);
        if (rc == ZY_OK && found.dir[0]) {
            rc = trainer_resume_from(&tr, found.dir);
            if (rc == ZY_OK) { /* now, not when the next progress line flushes */
                printf("resumed from %s (step %lld)\n", found.dir, (long long)tr.st.step);
                fflush(stdout);
            } else
                zy_fail_ctx("resuming from %s", found.dir);
        } else if (rc == ZY_OK) {
            printf("resume: no checkpoint under %s; starting fresh\n", tr.ckpt_root);
        }
    }
    /* rank 0 speaks for the run: the console, metrics, plots and (the state being replicated)
     * checkpoints; the other ranks' stdout goes nowhere, their errors still reach stderr */
    const int main_rank = rc == ZY_OK ? is_main_rank(&tr) : 1;
    if (!main_rank && !freopen("/dev/null", "w", stdout))
        rc = zy_fail_runtime("rank %d: cannot silence stdout", tr.ranks.comm.rank);
    if (rc == ZY_OK && main_rank) rc = zy_mkdirs(c->out_dir);
    if (rc == ZY_OK && main_rank && o->config_json) {
        char path[4096];
        rc = zy_path_join(path, sizeof path, c->out_dir, "train_config.json");
        if (rc == ZY_OK) rc = zy_write_file_atomic(path, o->config_json, strlen(o->config_json));
    }
    if (rc == ZY_OK && main_rank) rc = metrics_open(&tr.metrics, c->out_dir);
    if (rc != ZY_OK) {
        trainer_free(&tr);
        return ZY_ERR;
    }
    zy_param_counts k = model_count_params(&c->model);
    char device_desc[64];
    if (tr.ranks.comm.world > 1)
        snprintf(device_desc, sizeof device_desc, "%d %s ranks (%s), data parallel",
                 tr.ranks.comm.world, tr.ctx.device == ZY_DEV_CUDA ? "GPU" : "CPU",
                 tr.ranks.comm.b->name);
    else if (tr.ctx.device == ZY_DEV_CUDA)
        snprintf(device_desc, sizeof device_desc, "GPU %d, bf16 activations", tr.ctx.gpu);
    else
        snprintf(device_desc, sizeof device_desc, "CPU, %d threads", tr.ctx.num_threads);
    printf("model %s: %.2fM parameters (%.2fM active per token without the embedding); "
           "%d x %d tokens x %d accumulation per step%s; %s; %s\n",
           c->model_desc, k.total / 1e6, k.active_no_embed / 1e6, tr.cfg->batch_size,
           tr.cfg->seq_len, c->grad_accum, c->recompute ? " (activations recomputed)" : "",
           c->optim.use_muon ? "Muon + AdamW" : "AdamW", device_desc);
    if (tr.ranks.comm.world > 1) rc = report_zero1(&tr);
    if (rc != ZY_OK) {
        trainer_free(&tr);
        return ZY_ERR;
    }
    double t_start = zy_now(), last_val = NAN, tokens_before = tr.tokens_seen;
    int64_t first_step = tr.st.step, ran = 0;
    int stopped = 0;
    struct sigaction old_handlers[2];
    stop_signals_catch(old_handlers);
    /* --stop-after 0: the state as loaded (or initialised) saved in this run's layout without a
     * step: with --resume under M ranks, a checkpoint of N ranks rewritten for M (the same tensors
     * by name, bit for bit: the reshape is this trainer's own load and save, so no separate
     * converter can drift from them), or checked to load on M before GPU time is spent; without
     * it, a fresh run's step-0 checkpoint */
    if (o->stop_after == 0) {
        rc = trainer_save_checkpoint(&tr);
        if (rc == ZY_OK) rc = trainer_finish_checkpoint(&tr);
        if (rc == ZY_OK)
            printf("stopped on request (--stop-after 0) at step %lld after its checkpoint\n",
                   (long long)tr.st.step);
        stopped = rc == ZY_OK;
    }
    if (!stopped && tr.st.step == 0 && c->eval_interval > 0) {
        rc = evaluate(&tr, c->eval_batches, &last_val, NULL);
        if (rc == ZY_OK && tr.metrics) metrics_scalar(tr.metrics, "val_loss", 0, last_val);
        if (rc == ZY_OK) printf("step 0 | val loss %.4f\n", last_val);
    }
    long long failed_after = -1; /* the step the loop's bookkeeping is working on */
    while (rc == ZY_OK && !stopped && tr.st.step < c->steps) {
        failed_after = -1;
        if ((rc = trainer_phase_begin_step(&tr)) != ZY_OK) break; /* a phase boundary */
        const zy_train_config *pc = tr.cfg;                       /* the phase's view */
        /* an injected fault may write the weights: none may still be arriving */
        if (getenv("ZAYAC_FAULT") && (rc = step_weights_ready(&tr.st)) != ZY_OK) break;
        fault_at_step(&tr.st, tr.st.step + 1, tr.ranks.comm.rank);
        skip_batch_if_marked(tr.train, tr.st.step + 1, pc->grad_accum, tr.st.ids, tr.st.targets);
        float lr = phases_lr(&tr.phases, tr.st.step);
        double t0 = zy_now(), loss, gnorm;
        zy_step_hooks hooks = {
            .next_batch = next_train_batch, .stop_vote = read_stop_signal, .user = &tr};
        rc = step_run(&tr.st, &hooks, lr, &loss, &gnorm);
        if (rc != ZY_OK) {
            zy_fail_ctx("step %lld", (long long)tr.st.step + 1);
            break;
        }
        failed_after = tr.st.step; /* what fails from here on names the step it follows */
        heartbeat_beat(tr.st.step, first_step, tr.ranks.comm.rank);
        tr.tokens_seen += (double)pc->batch_size * pc->seq_len * pc->grad_accum;
        ran++;
        double dt = zy_now() - t0;
        double tok_s = (double)pc->batch_size * pc->seq_len * pc->grad_accum / dt;
        const step_cost cost = measure_step(&tr, tok_s);
        if (tr.metrics) log_step(&tr, loss, gnorm, lr, tok_s, &cost);
        if (tr.st.step % c->log_interval == 0 || tr.st.step == c->steps) {
            char line[256];
            double elapsed = zy_now() - t_start;
            /* counts of this run, so the ETA follows this run's pace after a resume */
            progress_line(line, sizeof line, tr.st.step - first_step, c->steps - first_step, loss,
                          tok_s, elapsed);
            if (first_step > 0) {
                char global[64];
                snprintf(global, sizeof global, " | global step %lld", (long long)tr.st.step);
                strncat(line, global, sizeof line - strlen(line) - 1);
            }
            zy_load_summary worst = router_worst_layer(&tr);
            char mfu[32] = "";
            if (isfinite(cost.mfu)) snprintf(mfu, sizeof mfu, " (MFU %.1f%%)", 100 * cost.mfu);
            printf("%s | lr %.2e | gnorm %.3f | experts max %.2f min %.2f skip %.2f load %.2f | "
                   "%.3g TFLOP/s%s | mem %.2f GiB\n",
                   line, lr, gnorm, worst.max_frac, worst.min_frac, worst.skip_frac, cost.load,
                   cost.model_tflops, mfu, cost.mem_gib);
            fflush(stdout);
        }
        const int64_t asked = tr.st.stop_agreed; /* a signal to any rank stops them all */
        const int signalled = asked != 0;
        const int stopping =
            (signalled || (o->stop_after >= 0 && ran >= o->stop_after)) && tr.st.step < c->steps;
        if (!signalled && c->eval_interval > 0 &&
            (tr.st.step % c->eval_interval == 0 || tr.st.step == c->steps)) {
            rc = evaluate(&tr, c->eval_batches, &last_val, NULL);
            if (rc != ZY_OK) break;
            if (tr.metrics) metrics_scalar(tr.metrics, "val_loss", tr.st.step, last_val);
            printf("step %lld | val loss %.4f | val ppl %.2f\n", (long long)tr.st.step, last_val,
                   exp(last_val));
            print_samples(&tr); /* what the model writes now, not only at the end */
        }
        if (tr.metrics && (rc = metrics_flush(tr.metrics)) != ZY_OK) break;
        const int checkpoint =
            (c->checkpoint_interval > 0 && tr.st.step % c->checkpoint_interval == 0) ||
            tr.st.step == c->steps || stopping;
        if (checkpoint) rc = trainer_save_checkpoint(&tr);                /* collective */
        if (stopping && rc == ZY_OK) rc = trainer_finish_checkpoint(&tr); /* written before 3 */
        if (stopping && rc == ZY_OK) {
            printf("stopped on request (%s) at step %lld after its checkpoint\n",
                   signalled ? strsignal((int)asked) : "--stop-after", (long long)tr.st.step);
            stopped = 1;
            break;
        }
    }
    stop_signals_restore(old_handlers);
    if (rc == ZY_OK) rc = step_weights_ready(&tr.st);     /* the samples and the end read them */
    if (rc == ZY_OK) rc = trainer_finish_checkpoint(&tr); /* the last save must have landed */
    if (rc != ZY_OK && failed_after >= 0) zy_fail_ctx("after step %lld", failed_after);
    if (rc == ZY_OK && tr.metrics) rc = metrics_flush(tr.metrics);
    if (rc == ZY_OK && tr.metrics) {
        char png[4096];
        if (zy_path_join(png, sizeof png, c->out_dir, "loss.png") == ZY_OK &&
            metrics_plot_loss(metrics_jsonl_path(tr.metrics), png) == ZY_OK)
            printf("loss curve: %s\n", png);
        double wall = zy_now() - t_start;
        printf("done: %lld steps in %.1f s (%.0f tokens/s)\n", (long long)ran, wall,
               (tr.tokens_seen - tokens_before) / wall);
        if (tr.st.step == c->steps && c->eval_interval == 0) print_samples(&tr); /* else done */
    }
    if (tr.metrics) { /* a finished run's metrics must reach the disk whole */
        int closed = metrics_close(tr.metrics);
        tr.metrics = NULL;
        if (rc == ZY_OK) rc = closed;
    }
    trainer_free(&tr);
    return rc == ZY_OK && stopped ? TRAIN_STOPPED : rc;
}

int train_eval(const zy_train_config *c, const char *model_dir, zy_skip_bias_rule rule,
               int64_t batches, double *loss, int64_t *tokens) {
    trainer tr;
    memset(&tr, 0, sizeof tr);
    tr.cfg = c;
    comm_init_single(&tr.ranks.comm); /* eval runs in one process */
    const dist_env alone = {.rank = 0, .world = 1, .local_rank = 0, .local_world = 1};
    int rc = setup_device(&tr, &alone);
    char what[ZY_PATH_MAX + 128];
    snprintf(what, sizeof what, "evaluating %s with batch %d x %d", model_dir, c->batch_size,
             c->seq_len);
    if (rc == ZY_OK)
        rc = mem_check(&tr.ctx, &c->model, c->batch_size, c->seq_len, 0, NULL, 1, 1, what, NULL);
    if (rc == ZY_OK) rc = step_init_model(&tr.st, &tr.ctx, &c->model, c->batch_size, c->seq_len, 0);
    if (rc == ZY_OK) rc = batches_open(&tr.val, c, 1, c->seed + 1000003);
    if (rc == ZY_OK) rc = check_data_fits(&tr, tr.val, "validation", model_dir);
    if (rc == ZY_OK) rc = hf_load_model(&tr.st.model, model_dir, rule);
    if (rc == ZY_OK) rc = step_init_acts(&tr.st, 0);
    if (rc == ZY_OK) rc = evaluate(&tr, batches, loss, tokens);
    trainer_free(&tr);
    return rc;
}
