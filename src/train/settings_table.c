/* The table of training settings (settings.h): each key's type, range, default, doc and field, and
 * the readers and writers of the three values with a shape of their own (model, data, prompts). */
#include "base/err.h"
#include "base/fileio.h"
#include "train/settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* "model": a preset name, a config.json path (or folder) or an inline HF config object. */
static int read_model(zy_train_config *c, const cJSON *v, const char *source) {
    if (cJSON_IsObject(v)) {
        char *text = cJSON_PrintUnformatted(v);
        int rc = config_parse_json(&c->model, text, source);
        free(text);
        ZY_TRY(rc);
        snprintf(c->model_desc, sizeof c->model_desc, "inline config");
        c->model_inline = 1;
        return config_validate(&c->model, source);
    }
    if (!cJSON_IsString(v))
        return zy_fail("%s: model must be a preset name, a path or an object", source);
    if (strlen(v->valuestring) >= sizeof c->model_desc)
        return zy_fail("%s: model is longer than %zu bytes", source, sizeof c->model_desc - 1);
    snprintf(c->model_desc, sizeof c->model_desc, "%s", v->valuestring);
    c->model_inline = 0;
    int rc = zy_path_exists(v->valuestring) ? config_load(&c->model, v->valuestring)
                                            : config_preset(&c->model, v->valuestring);
    return rc == ZY_OK ? ZY_OK : zy_fail_ctx("%s: model", source);
}

/* An inline model prints as the full HF config it resolved to; a name or path as it is. */
static cJSON *write_model(const zy_train_config *c) {
    if (!c->model_inline) return cJSON_CreateString(c->model_desc);
    char *text = config_to_json(&c->model);
    cJSON *o = cJSON_Parse(text);
    free(text);
    ZY_CHECK(o != NULL);
    return o;
}

/* "data": one path, or a list of {path, weight}. */
static int read_data(zy_train_config *c, const cJSON *v, const char *source) {
    if (cJSON_IsString(v)) {
        if (!v->valuestring[0])
            return zy_fail("%s: data is empty: name a folder from zayac data prepare", source);
        if (strlen(v->valuestring) >= ZY_PATH_MAX)
            return zy_fail("%s: data is longer than %d bytes", source, ZY_PATH_MAX - 1);
        c->n_sources = 1;
        snprintf(c->sources[0].path, ZY_PATH_MAX, "%s", v->valuestring);
        c->sources[0].weight = 1.0;
        return ZY_OK;
    }
    if (!cJSON_IsArray(v))
        return zy_fail("%s: data must be a path or a list of {\"path\", \"weight\"}", source);
    c->n_sources = 0;
    const cJSON *s;
    cJSON_ArrayForEach(s, v) {
        const int i = c->n_sources;
        if (i == ZY_MAX_SOURCES)
            return zy_fail("%s: data lists more than %d sources", source, ZY_MAX_SOURCES);
        if (!cJSON_IsObject(s)) return zy_fail("%s: data[%d] must be an object", source, i);
        const cJSON *it;
        cJSON_ArrayForEach(it, s) {
            if (strcmp(it->string, "path") && strcmp(it->string, "weight"))
                return zy_fail("%s: unknown key data[%d].%s (a source has path and weight)", source,
                               i, it->string);
        }
        zy_data_source *d = &c->sources[i];
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(s, "path");
        if (!cJSON_IsString(p) || !p->valuestring[0])
            return zy_fail("%s: data[%d].path is required (a folder from zayac data prepare)",
                           source, i);
        if (strlen(p->valuestring) >= sizeof d->path)
            return zy_fail("%s: data[%d].path is longer than %zu bytes", source, i,
                           sizeof d->path - 1);
        snprintf(d->path, sizeof d->path, "%s", p->valuestring);
        d->weight = 1.0;
        const cJSON *w = cJSON_GetObjectItemCaseSensitive(s, "weight");
        char label[32];
        snprintf(label, sizeof label, "data[%d].weight", i);
        if (w) ZY_TRY(settings_number(w, source, label, 1e-9, 1e9, 0, &d->weight));
        c->n_sources++;
    }
    return ZY_OK;
}

static cJSON *write_data(const zy_train_config *c) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < c->n_sources; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "path", c->sources[i].path);
        cJSON_AddNumberToObject(o, "weight", c->sources[i].weight);
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

/* "cuda.attention_workspace_gib": "auto" (ZY_ATTN_WORKSPACE_AUTO) or a number of GiB. */
static int read_attention_workspace(zy_train_config *c, const cJSON *v, const char *source) {
    if (cJSON_IsString(v) && !strcmp(v->valuestring, "auto")) {
        c->cuda.attention_workspace_gib = ZY_ATTN_WORKSPACE_AUTO;
        return ZY_OK;
    }
    if (!cJSON_IsNumber(v))
        return zy_fail("%s: cuda.attention_workspace_gib must be \"auto\" or a number of GiB",
                       source);
    if (!(v->valuedouble >= ZY_ATTN_WORKSPACE_GIB_MIN &&
          v->valuedouble <= ZY_ATTN_WORKSPACE_GIB_MAX))
        return zy_fail("%s: cuda.attention_workspace_gib = %g is outside [%g, %g] (or \"auto\")",
                       source, v->valuedouble, ZY_ATTN_WORKSPACE_GIB_MIN,
                       ZY_ATTN_WORKSPACE_GIB_MAX);
    c->cuda.attention_workspace_gib = (float)v->valuedouble;
    return ZY_OK;
}

static cJSON *write_attention_workspace(const zy_train_config *c) {
    if (c->cuda.attention_workspace_gib == ZY_ATTN_WORKSPACE_AUTO)
        return cJSON_CreateString("auto");
    return cJSON_CreateNumber(c->cuda.attention_workspace_gib);
}

/* "samples.prompts": up to ZY_MAX_PROMPTS strings. */
static int read_prompts(zy_train_config *c, const cJSON *v, const char *source) {
    if (!cJSON_IsArray(v)) return zy_fail("%s: samples.prompts must be a list of strings", source);
    c->n_prompts = 0;
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        if (!cJSON_IsString(it) || c->n_prompts == ZY_MAX_PROMPTS ||
            strlen(it->valuestring) >= sizeof c->prompts[0])
            return zy_fail("%s: samples.prompts holds at most %d strings of < %zu bytes", source,
                           ZY_MAX_PROMPTS, sizeof c->prompts[0]);
        snprintf(c->prompts[c->n_prompts++], sizeof c->prompts[0], "%s", it->valuestring);
    }
    return ZY_OK;
}

static cJSON *write_prompts(const zy_train_config *c) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < c->n_prompts; i++)
        cJSON_AddItemToArray(a, cJSON_CreateString(c->prompts[i]));
    return a;
}

/* "phases": a list of objects, each a phase of the run: its length (steps or tokens) and what it
 * changes (batch_size, seq_len, rope_theta, data, schedule; the rest carry on from the phase
 * before it: train_config.c resolves them). The keys the table knows are read through the table,
 * so a phase's seq_len or schedule.warmup is checked as the top-level one is. Read after the
 * top-level keys (its row comes after theirs): a phase's schedule fills what it leaves out from
 * the top-level schedule. */
static const char *const phase_table_keys[] = {"steps", "batch_size", "seq_len", "data",
                                               "schedule"};
static const unsigned phase_table_bits[] = {ZY_PHASE_HAS_STEPS, ZY_PHASE_HAS_BATCH,
                                            ZY_PHASE_HAS_SEQ, ZY_PHASE_HAS_DATA,
                                            ZY_PHASE_HAS_SCHEDULE};

/* rope_theta: a number (the hybrid layers: global attention) or {"hybrid": x, "hybrid_sliding": y}.
 */
static int read_phase_theta(zy_phase *p, const cJSON *v, const char *label) {
    static const char *const types[2] = {"hybrid", "hybrid_sliding"};
    static const unsigned bits[2] = {ZY_PHASE_HAS_THETA, ZY_PHASE_HAS_THETA_SLIDING};
    char key[64];
    if (cJSON_IsNumber(v)) {
        p->given |= ZY_PHASE_HAS_THETA;
        return settings_number(v, label, "rope_theta", 1e-3, 1e15, 0, &p->rope_theta[0]);
    }
    if (!cJSON_IsObject(v))
        return zy_fail("%s.rope_theta must be a number (the hybrid layers) or an object "
                       "{\"hybrid\": theta, \"hybrid_sliding\": theta}",
                       label);
    const cJSON *it;
    cJSON_ArrayForEach(it, v) {
        int t = !strcmp(it->string, types[0]) ? 0 : !strcmp(it->string, types[1]) ? 1 : -1;
        if (t < 0)
            return zy_fail("%s.rope_theta: unknown layer type \"%s\" (hybrid, hybrid_sliding)",
                           label, it->string);
        snprintf(key, sizeof key, "rope_theta.%s", types[t]);
        ZY_TRY(settings_number(it, label, key, 1e-3, 1e15, 0, &p->rope_theta[t]));
        p->given |= bits[t];
    }
    return ZY_OK;
}

/* One phase object into p; tmp is scratch holding the top-level values. */
static int read_phase(zy_phase *p, const cJSON *o, zy_train_config *tmp, const char *label) {
    memset(p, 0, sizeof *p);
    if (!cJSON_IsObject(o)) return zy_fail("%s must be an object", label);
    cJSON *sub = cJSON_CreateObject();
    const cJSON *it;
    int rc = ZY_OK;
    cJSON_ArrayForEach(it, o) {
        const char *k = it->string;
        int known = 0;
        for (int i = 0; i < 5 && !known; i++)
            if (!strcmp(k, phase_table_keys[i])) {
                known = 1;
                p->given |= phase_table_bits[i];
                cJSON_AddItemToObject(sub, k, cJSON_Duplicate(it, 1));
            }
        if (known) continue;
        if (!strcmp(k, "tokens")) {
            double x;
            rc = settings_number(it, label, "tokens", 1, 1e18, 1, &x);
            p->tokens = (int64_t)x;
            p->given |= ZY_PHASE_HAS_TOKENS;
        } else if (!strcmp(k, "rope_theta")) {
            rc = read_phase_theta(p, it, label);
        } else if (!strcmp(k, "name")) {
            if (!cJSON_IsString(it) || strlen(it->valuestring) >= sizeof p->name)
                rc = zy_fail("%s.name must be a string of < %zu bytes", label, sizeof p->name);
            else
                snprintf(p->name, sizeof p->name, "%s", it->valuestring);
        } else {
            rc = zy_fail("%s: unknown key %s (a phase has name, steps or tokens, batch_size, "
                         "seq_len, rope_theta, data, schedule)",
                         label, k);
        }
        if (rc != ZY_OK) break;
    }
    if (rc == ZY_OK && !(p->given & ZY_PHASE_HAS_STEPS) == !(p->given & ZY_PHASE_HAS_TOKENS))
        rc = zy_fail("%s: give its length as exactly one of steps or tokens", label);
    if (rc == ZY_OK) rc = settings_read(tmp, sub, label);
    cJSON_Delete(sub);
    ZY_TRY(rc);
    if (p->given & ZY_PHASE_HAS_STEPS) p->steps = tmp->steps;
    p->batch_size = tmp->batch_size;
    p->seq_len = tmp->seq_len;
    p->n_sources = tmp->n_sources;
    memcpy(p->sources, tmp->sources, sizeof p->sources);
    p->schedule = tmp->schedule;
    return ZY_OK;
}

static int read_phases(zy_train_config *c, const cJSON *v, const char *source) {
    if (!cJSON_IsArray(v)) return zy_fail("%s: phases must be a list of objects", source);
    if (cJSON_GetArraySize(v) > ZY_MAX_PHASES)
        return zy_fail("%s: phases lists %d phases, at most %d", source, cJSON_GetArraySize(v),
                       ZY_MAX_PHASES);
    zy_train_config *tmp = zy_malloc(sizeof *tmp);
    int rc = ZY_OK, n = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, v) {
        char label[ZY_PATH_MAX + 64];
        snprintf(label, sizeof label, "%s: phases[%d]", source, n);
        *tmp = *c; /* what the phase leaves out reads as the top-level value */
        if ((rc = read_phase(&c->phases[n], o, tmp, label)) != ZY_OK) break;
        n++;
    }
    free(tmp);
    c->n_phases = rc == ZY_OK ? n : 0;
    return rc;
}

/* Each phase with its resolved values (read back, it gives the same phases). */
static cJSON *write_phases(const zy_train_config *c) {
    cJSON *a = cJSON_CreateArray();
    zy_train_config *tmp = zy_malloc(sizeof *tmp);
    for (int i = 0; i < c->n_phases; i++) {
        const zy_phase *p = &c->phases[i];
        *tmp = *c;
        tmp->n_phases = 0; /* its schedule is written through the table: not its phases again */
        tmp->schedule = p->schedule;
        tmp->n_sources = p->n_sources;
        memcpy(tmp->sources, p->sources, sizeof p->sources);
        cJSON *o = cJSON_CreateObject();
        if (p->name[0]) cJSON_AddStringToObject(o, "name", p->name);
        char n[32];
        snprintf(n, sizeof n, "%lld", (long long)(p->tokens ? p->tokens : p->steps));
        cJSON_AddItemToObject(o, p->tokens ? "tokens" : "steps", cJSON_CreateRaw(n));
        cJSON_AddNumberToObject(o, "batch_size", p->batch_size);
        cJSON_AddNumberToObject(o, "seq_len", p->seq_len);
        cJSON *th = cJSON_AddObjectToObject(o, "rope_theta");
        cJSON_AddNumberToObject(th, "hybrid", p->rope_theta[0]);
        cJSON_AddNumberToObject(th, "hybrid_sliding", p->rope_theta[1]);
        cJSON_AddItemToObject(o, "data", write_data(tmp));
        if (p->given & ZY_PHASE_HAS_SCHEDULE) { /* the table's writer, for the same text */
            cJSON *all = settings_to_json(tmp);
            cJSON_AddItemToObject(o, "schedule", cJSON_DetachItemFromObject(all, "schedule"));
            cJSON_Delete(all);
        }
        cJSON_AddItemToArray(a, o);
    }
    free(tmp);
    return a;
}

static const char *const optimizers[] = {"adamw", "muon", NULL}; /* index = use_muon */
static const char *const muon_scales[] = {"none", "match_adamw_rms", "spectral", NULL};
static const char *const sched_kinds[] = {"constant", "cosine", "wsd", NULL};
static const char *const decay_shapes[] = {"linear", "sqrt", NULL};
static const char *const devices[] = {"auto", "cpu", "cuda", NULL};

#define TEXT_(x) #x
#define TEXT(x)  TEXT_(x) /* a macro's value as text: "2" */
#define AT(f)    offsetof(zy_train_config, f), sizeof(((zy_train_config *)0)->f)
#define NUM(key, type, f, lo, hi, def, doc)                                                        \
    { key, type, AT(f), lo, hi, NULL, def, doc, NULL, NULL, NULL }
#define BOOL(key, f, def, doc)                                                                     \
    { key, ZY_SET_BOOL, AT(f), 0, 1, NULL, def, doc, NULL, NULL, NULL }
#define STR(key, f, def, doc)                                                                      \
    { key, ZY_SET_STR, AT(f), 0, 0, NULL, def, doc, NULL, NULL, NULL }
#define PICK(key, type, f, choices, def, doc)                                                      \
    { key, type, AT(f), 0, 0, choices, def, doc, NULL, NULL, NULL }
#define CUSTOM(key, tname, rd, wr, def, doc)                                                       \
    { key, ZY_SET_CUSTOM, 0, 0, 0, 0, NULL, def, doc, tname, rd, wr }

const zy_setting zy_settings[] = {
    CUSTOM("model", "model", read_model, write_model, "\"tiny\"",
           "a preset name (configs/), an HF config.json path or folder, or an inline HF config"),
    STR("init_from", init_from, "\"\"",
        "HF checkpoint folder to start from (\"\" = fresh weights)"),
    STR("tokenizer", tokenizer, "\"\"",
        "tokenizer.json, copied into checkpoints and used for samples (\"\" = none)"),
    CUSTOM("data", "list", read_data, write_data, "[]",
           "required: a folder from `zayac data prepare` (or one of its shards, or a Megatron "
           "PREFIX.idx), or a list of {path, weight}"),
    NUM("batch_size", ZY_SET_INT, batch_size, 1, 1 << 20, "8", "sequences per micro-batch"),
    NUM("seq_len", ZY_SET_INT, seq_len, 1, 1 << 24, "128",
        "tokens per sequence (at most the model's max_position_embeddings)"),
    NUM("grad_accum", ZY_SET_INT, grad_accum, 1, 1 << 20, "1", "micro-batches per optimiser step"),
    BOOL("recompute", recompute, "false",
         "activation recomputation: each layer keeps only its input and the backward runs the "
         "layer's forward again (one more forward, the same results to the bit), so long "
         "sequences and wide models fit"),
    NUM("steps", ZY_SET_I64, steps, 1, 1e15, "1000", "optimiser steps of the whole run"),
    PICK("optimizer.name", ZY_SET_ENUM, optim.use_muon, optimizers, "\"muon\"",
         "muon: Muon for hidden matrices, AdamW for the rest; adamw: AdamW for everything"),
    NUM("optimizer.lr", ZY_SET_FLOAT, optim.lr, 0, 10, "3e-4", "peak learning rate"),
    NUM("optimizer.beta1", ZY_SET_FLOAT, optim.beta1, 0, 0.999999, "0.9",
        "AdamW first-moment decay"),
    NUM("optimizer.beta2", ZY_SET_FLOAT, optim.beta2, 0, 0.999999, "0.95",
        "AdamW second-moment decay"),
    NUM("optimizer.eps", ZY_SET_FLOAT, optim.eps, 1e-30, 1, "1e-8", "AdamW epsilon"),
    PICK("optimizer.adam_moments", ZY_SET_ENUM, optim.adam_moments, zy_adam_moments_names,
         "\"float32\"",
         "precision of AdamW's moments: float32, or bfloat16 rounded stochastically (half the "
         "state and 22 instead of 30 bytes an element a step on a GPU; optim/optim.h)"),
    NUM("optimizer.weight_decay", ZY_SET_FLOAT, optim.weight_decay, 0, 10, "0.1",
        "decoupled weight decay of matrices and embeddings"),
    NUM("optimizer.muon_momentum", ZY_SET_FLOAT, optim.muon_momentum, 0, 0.999999, "0.95",
        "Muon momentum"),
    PICK("optimizer.muon_momentum_dtype", ZY_SET_ENUM, optim.muon_momentum_dtype,
         zy_adam_moments_names, "\"float32\"",
         "precision of Muon's momentum: float32, or bfloat16 rounded stochastically as AdamW's "
         "moments are (half its state and 4 bytes an element less a step on a GPU; optim/optim.h)"),
    BOOL("optimizer.nesterov", optim.muon_nesterov, "true", "Nesterov momentum for Muon"),
    NUM("optimizer.ns_steps", ZY_SET_INT, optim.muon_ns_steps, 1, 100, "5",
        "Newton-Schulz iterations of Muon"),
    PICK("optimizer.ns_coefficients", ZY_SET_ENUM, optim.muon_ns_coefs, zy_ns_coefs_names,
         "\"fixed\"",
         "Newton-Schulz coefficients: Muon's fixed quintic, or minimax ones per iteration for "
         "the iteration count (optim/ns_coef.h)"),
    PICK("optimizer.ns_precondition", ZY_SET_ENUM, optim.muon_ns_precond, zy_ns_precond_names,
         "\"frobenius\"",
         "Newton-Schulz's starting iterate: the Frobenius-normalised momentum, or AOL's rescaling "
         "of it, which starts small singular values higher (optim/ns_coef.h)"),
    PICK("optimizer.muon_scale", ZY_SET_ENUM, optim.muon_scale, muon_scales, "\"match_adamw_rms\"",
         "scaling of the orthogonalised Muon update (optim/optim.h)"),
    NUM("optimizer.muon_lr_ratio", ZY_SET_FLOAT, optim.muon_lr_ratio, 0, 1e6, "1",
        "Muon lr over the AdamW lr (> 0)"),
    PICK("schedule.kind", ZY_SET_ENUM, schedule.kind, sched_kinds, "\"cosine\"",
         "learning-rate schedule after the warmup"),
    NUM("schedule.warmup", ZY_SET_I64, schedule.warmup_steps, 0, 1e15, "100",
        "linear warmup steps (shortened to the run when longer, with a warning)"),
    NUM("schedule.min_lr_ratio", ZY_SET_FLOAT, schedule.min_lr_ratio, 0, 1, "0.1",
        "final lr over the peak lr (cosine, wsd)"),
    NUM("schedule.decay_frac", ZY_SET_FLOAT, schedule.decay_frac, 0, 1, "0.2",
        "wsd: fraction of the steps spent decaying"),
    PICK("schedule.decay", ZY_SET_ENUM, schedule.decay, decay_shapes, "\"linear\"",
         "wsd: decay shape (1 - x or 1 - sqrt(x))"),
    /* after every key a phase can change: a phase starts from their values */
    CUSTOM("phases", "list", read_phases, write_phases, "[]",
           "run phases in order, each {steps or tokens, and any of batch_size, seq_len, "
           "rope_theta, data, schedule, name}; what a phase leaves out carries on from the phase "
           "before (README: Phases)"),
    NUM("grad_clip", ZY_SET_FLOAT, grad_clip, 0, 1e9, "1", "global gradient-norm clip (0 = off)"),
    NUM("spike.factor", ZY_SET_FLOAT, spike.factor, 0, 1e9, "0",
        "a step whose loss is above this times the running mean of the losses before it fails "
        "before its update, as a NaN loss does: the supervisor rolls back (0 = off; docs/"
        "supervisor.md)"),
    NUM("spike.warmup", ZY_SET_I64, spike.warmup, 0, 1e15, "100",
        "first steps whose losses only feed the running mean"),
    NUM("spike.decay", ZY_SET_FLOAT, spike.decay, 0, 0.999999, "0.99",
        "decay per step of the running mean (an exponential moving average)"),
    BOOL("balance.enabled", balance_enabled, "true", "router balancing-bias controller on"),
    NUM("balance.step_size", ZY_SET_FLOAT, balance.step_size, 0, 1, "1e-3",
        "balancing-bias change per step at full confidence"),
    NUM("balance.beta1", ZY_SET_FLOAT, balance.beta1, 0, 0.999999, "0.9",
        "balancing controller first-moment decay"),
    NUM("balance.beta2", ZY_SET_FLOAT, balance.beta2, 0, 0.999999, "0.999",
        "balancing controller second-moment decay"),
    NUM("eval_interval", ZY_SET_I64, eval_interval, 0, 1e15, "100",
        "steps between validation losses (0 = none)"),
    NUM("eval_batches", ZY_SET_I64, eval_batches, 1, 1e9, "8", "batches per validation loss"),
    NUM("checkpoint_interval", ZY_SET_I64, checkpoint_interval, 0, 1e15, "250",
        "steps between checkpoints (0 = only at the end)"),
    NUM("keep_checkpoints", ZY_SET_INT, keep_checkpoints, 0, 1e6, "3",
        "newest checkpoints kept (0 = all)"),
    BOOL("checkpoint_async", checkpoint_async, "true",
         "write checkpoints in the background (training pauses only for a copy of the state)"),
    NUM("log_interval", ZY_SET_I64, log_interval, 1, 1e15, "1", "steps between console lines"),
    NUM("mfu_peak_tflops", ZY_SET_FLOAT, mfu_peak_tflops, 0, 1e9, "0",
        "peak TFLOP/s of one device that MFU is reported against (0 = MFU not reported; "
        "`zayac bench train` measures the bf16 peak)"),
    STR("out_dir", out_dir, "\"runs/train\"", "output folder: checkpoints, metrics, plots"),
    NUM("seed", ZY_SET_U64, seed, 0, 9007199254740992.0, "1",
        "seed of the initial weights, data order and sampling"),
    PICK("device", ZY_SET_CHOICE, device, devices, "\"auto\"",
         "auto: GPU 0 when one is visible, else the CPU"),
    NUM("threads", ZY_SET_INT, threads, 0, 4096, "0", "OpenMP threads on the CPU (0 = all cores)"),
    CUSTOM("samples.prompts", "list", read_prompts, write_prompts, "[]",
           "prompts sampled after each validation and at the end when a tokenizer is set"),
    NUM("samples.tokens", ZY_SET_INT, sample_tokens, 1, 1 << 20, "48", "tokens sampled per prompt"),
    NUM("samples.temperature", ZY_SET_FLOAT, sample_temperature, 1e-6, 100, "0.8",
        "sampling temperature"),
    NUM("samples.top_p", ZY_SET_FLOAT, sample_top_p, 1e-6, 1, "0.9", "nucleus sampling mass"),
    NUM("cuda.expert_streams", ZY_SET_INT, cuda.expert_streams, 1, ZY_EXPERT_STREAMS_MAX,
        TEXT(ZY_EXPERT_STREAMS_DEFAULT), "CUDA streams the expert GEMMs share"),
    BOOL("cuda.overlap_optimizer", cuda.overlap_optimizer, "true",
         "one GPU: the optimizer update runs beside the next step's forward, each layer's "
         "weights waited for just before the forward reads them (same bits as without)"),
    BOOL("cuda.expert_chunk", cuda.expert_chunk, "false",
         "run the expert GEMMs by 256-row blocks in one batched call"),
    PICK("cuda.attention", ZY_SET_ENUM, cuda.attention, zy_attention_backend_names, "\"auto\"",
         "attention kernels: zayac's; cudnn (cuDNN's fused attention, loaded at run time; "
         "deterministic backward); auto (cuDNN where it loads and takes the shape within "
         "cuda.attention_workspace_gib of workspace, else zayac's; docs/attention.md)"),
    CUSTOM("cuda.attention_workspace_gib", "\"auto\" or GiB", read_attention_workspace,
           write_attention_workspace, "\"auto\"",
           "cap on cuDNN's attention backward workspace, GiB in [0.0625, 64]: auto attention runs "
           "cuDNN on a shape only when its backward fits it, in one pass or in chunks of query "
           "rows sized to it; \"auto\": what one pass of the longest shape needs where the GPU "
           "has room for it, else " TEXT(ZY_ATTN_WORKSPACE_GIB_BASE) " GiB"),
    NUM("dist.timeout_s", ZY_SET_FLOAT, dist_timeout_s, 1, 86400, "300",
        "data parallel: longest wait for another rank before the run fails (a dead or stuck "
        "rank); covers rank 0's checkpoint writes"),
    PICK("dist.embedding_update", ZY_SET_ENUM, optim.embedding_update, zy_embedding_update_names,
         "\"split\"",
         "data parallel: who updates the tied embedding. split: every rank a slice (its gradient "
         "reduce-scattered, the slices all-gathered after the update: each link direction "
         "carries a share); owner: its owner alone (reduced to it, broadcast after); "
         "replicated: every rank all of it (all-reduced, nothing sent after). split and "
         "replicated keep its optimizer state on every rank (docs/data-parallel.md)"),
};
const int zy_settings_count = (int)(sizeof zy_settings / sizeof zy_settings[0]);
