/* Training configuration from JSON + overrides (see train_config.h). */
#include "train/train_config.h"
#include "base/err.h"
#include "base/fileio.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void train_config_defaults(zy_train_config *c) {
    memset(c, 0, sizeof *c);
    config_defaults(&c->model);
    snprintf(c->model_desc, sizeof c->model_desc, "tiny");
    c->batch_size = 8;
    c->seq_len = 128;
    c->grad_accum = 1;
    c->steps = 1000;
    optim_config_default(&c->optim);
    schedule_default(&c->schedule, c->steps);
    c->schedule.kind = ZY_SCHED_COSINE;
    c->schedule.lr = c->optim.lr;
    c->grad_clip = 1.0f;
    balance_config_default(&c->balance);
    c->balance_enabled = 1;
    c->eval_interval = 100;
    c->eval_batches = 8;
    c->checkpoint_interval = 250;
    c->log_interval = 1;
    c->keep_checkpoints = 3;
    snprintf(c->out_dir, sizeof c->out_dir, "runs/train");
    c->seed = 1;
    snprintf(c->device, sizeof c->device, "auto");
    c->sample_tokens = 48;
    c->sample_temperature = 0.8f;
    c->sample_top_p = 0.9f;
}

/* Context for error messages while reading the tree. */
typedef struct {
    const char *source;
    char prefix[128];
} reader;

static int num(const reader *r, const cJSON *o, const char *key, double *out, double lo,
               double hi) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v) return ZY_OK;
    if (cJSON_IsBool(v))
        *out = cJSON_IsTrue(v);
    else if (!cJSON_IsNumber(v))
        return zy_fail("%s: %s%s must be a number", r->source, r->prefix, key);
    else
        *out = v->valuedouble;
    if (!(*out >= lo && *out <= hi))
        return zy_fail("%s: %s%s = %g is outside [%g, %g]", r->source, r->prefix, key, *out, lo,
                       hi);
    return ZY_OK;
}

static int num_i(const reader *r, const cJSON *o, const char *key, int64_t *out, double lo,
                 double hi) {
    double x = (double)*out;
    ZY_TRY(num(r, o, key, &x, lo, hi));
    if (x != floor(x))
        return zy_fail("%s: %s%s = %g must be an integer", r->source, r->prefix, key, x);
    *out = (int64_t)x;
    return ZY_OK;
}

static int num_int(const reader *r, const cJSON *o, const char *key, int *out, double lo,
                   double hi) {
    int64_t x = *out;
    ZY_TRY(num_i(r, o, key, &x, lo, hi));
    *out = (int)x;
    return ZY_OK;
}

static int num_f(const reader *r, const cJSON *o, const char *key, float *out, double lo,
                 double hi) {
    double x = *out;
    ZY_TRY(num(r, o, key, &x, lo, hi));
    *out = (float)x;
    return ZY_OK;
}

static int str(const reader *r, const cJSON *o, const char *key, char *out, size_t n) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!v || cJSON_IsNull(v)) return ZY_OK;
    if (!cJSON_IsString(v)) return zy_fail("%s: %s%s must be a string", r->source, r->prefix, key);
    if (strlen(v->valuestring) >= n)
        return zy_fail("%s: %s%s is too long", r->source, r->prefix, key);
    snprintf(out, n, "%s", v->valuestring);
    return ZY_OK;
}

/* Rejects keys of o that are not in allowed (NULL-terminated). */
static int known_keys(const reader *r, const cJSON *o, const char *const *allowed) {
    const cJSON *it;
    cJSON_ArrayForEach(it, o) {
        int ok = 0;
        for (const char *const *a = allowed; *a && !ok; a++) ok = strcmp(*a, it->string) == 0;
        if (!ok) return zy_fail("%s: unknown key %s%s", r->source, r->prefix, it->string);
    }
    return ZY_OK;
}

static int pick(const reader *r, const cJSON *o, const char *key, const char *const *names,
                int *out) {
    char buf[64] = "";
    ZY_TRY(str(r, o, key, buf, sizeof buf));
    if (!buf[0]) return ZY_OK;
    for (int i = 0; names[i]; i++)
        if (!strcmp(names[i], buf)) {
            *out = i;
            return ZY_OK;
        }
    return zy_fail("%s: %s%s = \"%s\" is not one of the accepted values", r->source, r->prefix, key,
                   buf);
}

static int read_model(zy_train_config *c, const reader *r, const cJSON *v) {
    if (!v) return config_preset(&c->model, "tiny");
    if (cJSON_IsObject(v)) {
        char *text = cJSON_PrintUnformatted(v);
        int rc = config_parse_json(&c->model, text, r->source);
        free(text);
        ZY_TRY(rc);
        snprintf(c->model_desc, sizeof c->model_desc, "inline config");
        return config_validate(&c->model, r->source);
    }
    if (!cJSON_IsString(v))
        return zy_fail("%s: model must be a preset name, a path or an object", r->source);
    snprintf(c->model_desc, sizeof c->model_desc, "%s", v->valuestring);
    int rc = zy_path_exists(v->valuestring) ? config_load(&c->model, v->valuestring)
                                            : config_preset(&c->model, v->valuestring);
    return rc == ZY_OK ? ZY_OK : zy_fail_ctx("%s: model", r->source);
}

static int read_tree(zy_train_config *c, const cJSON *root, const char *source) {
    static const char *const top[] = {"model",
                                      "init_from",
                                      "tokenizer",
                                      "data",
                                      "batch_size",
                                      "seq_len",
                                      "grad_accum",
                                      "steps",
                                      "optimizer",
                                      "schedule",
                                      "grad_clip",
                                      "balance",
                                      "eval_interval",
                                      "eval_batches",
                                      "checkpoint_interval",
                                      "keep_checkpoints",
                                      "log_interval",
                                      "out_dir",
                                      "seed",
                                      "device",
                                      "threads",
                                      "samples",
                                      NULL};
    reader r = {source, ""};
    ZY_TRY(known_keys(&r, root, top));
    ZY_TRY(read_model(c, &r, cJSON_GetObjectItemCaseSensitive(root, "model")));
    ZY_TRY(str(&r, root, "init_from", c->init_from, sizeof c->init_from));
    ZY_TRY(str(&r, root, "tokenizer", c->tokenizer, sizeof c->tokenizer));
    const cJSON *data = cJSON_GetObjectItemCaseSensitive(root, "data");
    if (cJSON_IsString(data)) {
        c->n_sources = 1;
        snprintf(c->sources[0].path, ZY_PATH_MAX, "%s", data->valuestring);
        c->sources[0].weight = 1.0;
    } else if (cJSON_IsArray(data)) {
        c->n_sources = 0;
        const cJSON *s;
        cJSON_ArrayForEach(s, data) {
            if (c->n_sources == ZY_MAX_SOURCES)
                return zy_fail("%s: data lists more than %d sources", source, ZY_MAX_SOURCES);
            zy_data_source *d = &c->sources[c->n_sources];
            reader rs = {source, ""};
            snprintf(rs.prefix, sizeof rs.prefix, "data[%d].", c->n_sources);
            static const char *const keys[] = {"path", "weight", NULL};
            if (!cJSON_IsObject(s))
                return zy_fail("%s: data[%d] must be an object", source, c->n_sources);
            ZY_TRY(known_keys(&rs, s, keys));
            d->weight = 1.0;
            ZY_TRY(str(&rs, s, "path", d->path, sizeof d->path));
            ZY_TRY(num(&rs, s, "weight", &d->weight, 1e-9, 1e9));
            if (!d->path[0]) return zy_fail("%s: data[%d].path is required", source, c->n_sources);
            c->n_sources++;
        }
    } else if (data) {
        return zy_fail("%s: data must be a path or a list of {path, weight}", source);
    }
    ZY_TRY(num_int(&r, root, "batch_size", &c->batch_size, 1, 1 << 20));
    ZY_TRY(num_int(&r, root, "seq_len", &c->seq_len, 1, 1 << 24));
    ZY_TRY(num_int(&r, root, "grad_accum", &c->grad_accum, 1, 1 << 20));
    ZY_TRY(num_i(&r, root, "steps", &c->steps, 1, 1e15));
    ZY_TRY(num_f(&r, root, "grad_clip", &c->grad_clip, 0, 1e9));
    ZY_TRY(num_i(&r, root, "eval_interval", &c->eval_interval, 0, 1e15));
    ZY_TRY(num_i(&r, root, "eval_batches", &c->eval_batches, 1, 1e9));
    ZY_TRY(num_i(&r, root, "checkpoint_interval", &c->checkpoint_interval, 0, 1e15));
    ZY_TRY(num_int(&r, root, "keep_checkpoints", &c->keep_checkpoints, 0, 1e6));
    ZY_TRY(num_i(&r, root, "log_interval", &c->log_interval, 1, 1e15));
    ZY_TRY(str(&r, root, "out_dir", c->out_dir, sizeof c->out_dir));
    int64_t seed = (int64_t)c->seed;
    ZY_TRY(num_i(&r, root, "seed", &seed, 0, 9007199254740992.0));
    c->seed = (uint64_t)seed;
    ZY_TRY(str(&r, root, "device", c->device, sizeof c->device));
    ZY_TRY(num_int(&r, root, "threads", &c->threads, 0, 4096));

    const cJSON *o = cJSON_GetObjectItemCaseSensitive(root, "optimizer");
    if (o) {
        static const char *const keys[] = {"name",     "lr",           "beta1",         "beta2",
                                           "eps",      "weight_decay", "muon_momentum", "nesterov",
                                           "ns_steps", "muon_scale",   "muon_lr_ratio", NULL};
        static const char *const names[] = {"adamw", "muon", NULL};
        static const char *const scales[] = {"none", "match_adamw_rms", "spectral", NULL};
        reader ro = {source, "optimizer."};
        if (!cJSON_IsObject(o)) return zy_fail("%s: optimizer must be an object", source);
        ZY_TRY(known_keys(&ro, o, keys));
        ZY_TRY(pick(&ro, o, "name", names, &c->optim.use_muon));
        ZY_TRY(num_f(&ro, o, "lr", &c->optim.lr, 0, 10));
        ZY_TRY(num_f(&ro, o, "beta1", &c->optim.beta1, 0, 0.999999));
        ZY_TRY(num_f(&ro, o, "beta2", &c->optim.beta2, 0, 0.999999));
        ZY_TRY(num_f(&ro, o, "eps", &c->optim.eps, 1e-30, 1));
        ZY_TRY(num_f(&ro, o, "weight_decay", &c->optim.weight_decay, 0, 10));
        ZY_TRY(num_f(&ro, o, "muon_momentum", &c->optim.muon_momentum, 0, 0.999999));
        ZY_TRY(num_int(&ro, o, "nesterov", &c->optim.muon_nesterov, 0, 1));
        ZY_TRY(num_int(&ro, o, "ns_steps", &c->optim.muon_ns_steps, 1, 100));
        int scale = (int)c->optim.muon_scale;
        ZY_TRY(pick(&ro, o, "muon_scale", scales, &scale));
        c->optim.muon_scale = (zy_muon_scale)scale;
        ZY_TRY(num_f(&ro, o, "muon_lr_ratio", &c->optim.muon_lr_ratio, 0, 1e6));
    }
    c->schedule.lr = c->optim.lr;
    c->schedule.total_steps = c->steps;
    const cJSON *s = cJSON_GetObjectItemCaseSensitive(root, "schedule");
    if (s) {
        static const char *const keys[] = {"kind",       "warmup", "min_lr_ratio",
                                           "decay_frac", "decay",  NULL};
        static const char *const kinds[] = {"constant", "cosine", "wsd", NULL};
        static const char *const shapes[] = {"linear", "sqrt", NULL};
        reader rs = {source, "schedule."};
        if (!cJSON_IsObject(s)) return zy_fail("%s: schedule must be an object", source);
        ZY_TRY(known_keys(&rs, s, keys));
        int kind = (int)c->schedule.kind, shape = (int)c->schedule.decay;
        ZY_TRY(pick(&rs, s, "kind", kinds, &kind));
        ZY_TRY(pick(&rs, s, "decay", shapes, &shape));
        c->schedule.kind = (zy_sched_kind)kind;
        c->schedule.decay = (zy_decay_shape)shape;
        ZY_TRY(num_i(&rs, s, "warmup", &c->schedule.warmup_steps, 0, 1e15));
        ZY_TRY(num_f(&rs, s, "min_lr_ratio", &c->schedule.min_lr_ratio, 0, 1));
        ZY_TRY(num_f(&rs, s, "decay_frac", &c->schedule.decay_frac, 0, 1));
    }
    const cJSON *b = cJSON_GetObjectItemCaseSensitive(root, "balance");
    if (b) {
        static const char *const keys[] = {"enabled", "step_size", "beta1", "beta2", NULL};
        reader rb = {source, "balance."};
        if (!cJSON_IsObject(b)) return zy_fail("%s: balance must be an object", source);
        ZY_TRY(known_keys(&rb, b, keys));
        ZY_TRY(num_int(&rb, b, "enabled", &c->balance_enabled, 0, 1));
        ZY_TRY(num_f(&rb, b, "step_size", &c->balance.step_size, 0, 1));
        ZY_TRY(num_f(&rb, b, "beta1", &c->balance.beta1, 0, 0.999999));
        ZY_TRY(num_f(&rb, b, "beta2", &c->balance.beta2, 0, 0.999999));
    }
    const cJSON *sm = cJSON_GetObjectItemCaseSensitive(root, "samples");
    if (sm) {
        static const char *const keys[] = {"prompts", "tokens", "temperature", "top_p", NULL};
        reader rp = {source, "samples."};
        if (!cJSON_IsObject(sm)) return zy_fail("%s: samples must be an object", source);
        ZY_TRY(known_keys(&rp, sm, keys));
        ZY_TRY(num_int(&rp, sm, "tokens", &c->sample_tokens, 1, 1 << 20));
        ZY_TRY(num_f(&rp, sm, "temperature", &c->sample_temperature, 1e-6, 100));
        ZY_TRY(num_f(&rp, sm, "top_p", &c->sample_top_p, 1e-6, 1));
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(sm, "prompts"), *it;
        if (p && !cJSON_IsArray(p)) return zy_fail("%s: samples.prompts must be a list", source);
        c->n_prompts = 0;
        cJSON_ArrayForEach(it, p) {
            if (!cJSON_IsString(it) || c->n_prompts == ZY_MAX_PROMPTS ||
                strlen(it->valuestring) >= sizeof c->prompts[0])
                return zy_fail("%s: samples.prompts holds at most %d strings of < 256 bytes",
                               source, ZY_MAX_PROMPTS);
            snprintf(c->prompts[c->n_prompts++], sizeof c->prompts[0], "%s", it->valuestring);
        }
    }
    return ZY_OK;
}

/* Sets root[a][b]... = value for a dotted key, creating objects on the way. */
static int apply_override(cJSON *root, const char *assignment) {
    const char *eq = strchr(assignment, '=');
    if (!eq || eq == assignment)
        return zy_fail("override '%s' is not of the form key=value", assignment);
    char key[256];
    if ((size_t)(eq - assignment) >= sizeof key) return zy_fail("override key too long");
    memcpy(key, assignment, (size_t)(eq - assignment));
    key[eq - assignment] = 0;
    cJSON *value = cJSON_Parse(eq + 1);
    if (!value) value = cJSON_CreateString(eq + 1);
    cJSON *obj = root;
    char *part = key, *dot;
    while ((dot = strchr(part, '.')) != NULL) {
        *dot = 0;
        cJSON *next = cJSON_GetObjectItemCaseSensitive(obj, part);
        if (!next) next = cJSON_AddObjectToObject(obj, part);
        if (!cJSON_IsObject(next)) {
            cJSON_Delete(value);
            return zy_fail("override '%s': %s is not an object", assignment, part);
        }
        obj = next;
        part = dot + 1;
    }
    if (cJSON_GetObjectItemCaseSensitive(obj, part))
        cJSON_ReplaceItemInObjectCaseSensitive(obj, part, value);
    else
        cJSON_AddItemToObject(obj, part, value);
    return ZY_OK;
}

static int check(const zy_train_config *c, const char *source) {
    if (c->n_sources == 0) return zy_fail("%s: data: at least one source is required", source);
    if (c->seq_len > c->model.max_position_embeddings)
        return zy_fail("%s: seq_len %d exceeds the model's max_position_embeddings %d", source,
                       c->seq_len, c->model.max_position_embeddings);
    if (strcmp(c->device, "auto") && strcmp(c->device, "cpu") && strcmp(c->device, "cuda"))
        return zy_fail("%s: device must be auto, cpu or cuda, not '%s'", source, c->device);
    ZY_TRY(optim_config_check(&c->optim));
    ZY_TRY(schedule_check(&c->schedule));
    if (c->balance_enabled) ZY_TRY(balance_config_check(&c->balance));
    return ZY_OK;
}

int train_config_build(zy_train_config *c, const char *path, const char *const *overrides,
                       int n_overrides, char **json_out) {
    train_config_defaults(c);
    cJSON *root = NULL;
    char source[ZY_PATH_MAX + 64];
    snprintf(source, sizeof source, "%s%s", path ? path : "command line",
             path && n_overrides > 0 ? " (with --set overrides)" : "");
    if (path) {
        char *text;
        ZY_TRY(zy_read_file(path, &text, NULL));
        const char *end = NULL;
        root = cJSON_ParseWithOpts(text, &end, 0);
        if (!root) {
            long at = end ? (long)(end - text) : -1;
            free(text);
            return zy_fail("%s: not valid JSON (parsing stopped at byte %ld)", path, at);
        }
        free(text);
        if (!cJSON_IsObject(root)) {
            cJSON_Delete(root);
            return zy_fail("%s: the training config must be a JSON object", path);
        }
    } else {
        root = cJSON_CreateObject();
    }
    int rc = ZY_OK;
    for (int i = 0; i < n_overrides && rc == ZY_OK; i++) rc = apply_override(root, overrides[i]);
    if (rc == ZY_OK) rc = read_tree(c, root, source);
    if (rc == ZY_OK) rc = check(c, source);
    if (rc == ZY_OK && json_out) *json_out = cJSON_Print(root);
    cJSON_Delete(root);
    return rc;
}
