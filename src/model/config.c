/* The ZAYA1 model configuration (see config.h): HF config.json parsing with type checks,
 * validation, serialisation that transformers' ZayaConfig loads, and the named presets
 * (configs/<name>.json, or the built-in copies below when the file is not found). */
#include "model/config.h"
#include "base/err.h"
#include "base/fileio.h"
#include "model/model.h"

#include <cjson/cJSON.h>
#include <limits.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

static const char *const layer_type_names[2] = {"hybrid", "hybrid_sliding"};

void config_defaults(zy_config *c) {
    /* transformers 5.17 ZayaConfig's defaults, field for field. */
    memset(c, 0, sizeof *c);
    c->vocab_size = 262272;
    c->hidden_size = 2048;
    c->num_hidden_layers = 40;
    c->num_attention_heads = 8;
    c->num_key_value_heads = 2;
    c->head_dim = 128;
    c->num_experts = 16;
    c->num_experts_per_tok = 1;
    c->moe_intermediate_size = 2048;
    c->router_hidden_size = 256;
    c->max_position_embeddings = 131072;
    c->cca_time0 = 2;
    c->cca_time1 = 2;
    c->sliding_window = 0;
    c->tie_word_embeddings = 1;
    c->attention_bias = 0;
    c->lm_head_bias = 0;
    c->pad_token_id = 0;
    c->bos_token_id = 2;
    config_set_eos(c, 106);
    c->attention_dropout = 0.0;
    c->rms_norm_eps = 1e-5;
    c->initializer_range = 0.02;
    snprintf(c->hidden_act, sizeof c->hidden_act, "silu");
    snprintf(c->dtype, sizeof c->dtype, "float32");
    c->rope[ZY_LAYER_HYBRID] = (zy_rope_params){5000000.0, 0.5, 1};
    c->rope[ZY_LAYER_HYBRID_SLIDING] = (zy_rope_params){10000.0, 0.5, 1};
    for (int i = 0; i < ZY_MAX_LAYERS; i++) c->layer_types[i] = ZY_LAYER_HYBRID;
}

/* ---- validation ---- */

static int check_sizes(const zy_config *c, const char *source);

int config_validate(const zy_config *c, const char *source) {
    const struct {
        const char *name;
        int v;
    } pos[] = {
        {"vocab_size", c->vocab_size},
        {"hidden_size", c->hidden_size},
        {"num_hidden_layers", c->num_hidden_layers},
        {"num_attention_heads", c->num_attention_heads},
        {"num_key_value_heads", c->num_key_value_heads},
        {"head_dim", c->head_dim},
        {"num_experts", c->num_experts},
        {"moe_intermediate_size", c->moe_intermediate_size},
        {"router_hidden_size", c->router_hidden_size},
        {"max_position_embeddings", c->max_position_embeddings},
        {"cca_time0", c->cca_time0},
        {"cca_time1", c->cca_time1},
    };
    for (size_t i = 0; i < sizeof pos / sizeof pos[0]; i++)
        if (pos[i].v < 1)
            return zy_fail("%s: %s = %d, must be at least 1", source, pos[i].name, pos[i].v);
    if (c->num_hidden_layers > ZY_MAX_LAYERS)
        return zy_fail("%s: num_hidden_layers = %d, at most %d supported", source,
                       c->num_hidden_layers, ZY_MAX_LAYERS);
    if (c->num_experts_per_tok != 1)
        return zy_fail("%s: num_experts_per_tok = %d, only 1 (top-1 routing) is supported", source,
                       c->num_experts_per_tok);
    if (c->num_attention_heads % c->num_key_value_heads != 0)
        return zy_fail("%s: num_attention_heads = %d is not a multiple of num_key_value_heads = %d",
                       source, c->num_attention_heads, c->num_key_value_heads);
    if (c->head_dim % 2 != 0)
        return zy_fail("%s: head_dim = %d is odd (rotary pairs and the half-delayed values need an "
                       "even width)",
                       source, c->head_dim);
    if (!c->tie_word_embeddings)
        return zy_fail("%s: tie_word_embeddings = false is not supported (the head is the "
                       "embedding)",
                       source);
    if (c->attention_bias) return zy_fail("%s: attention_bias = true is not supported", source);
    if (c->lm_head_bias) return zy_fail("%s: lm_head_bias = true is not supported", source);
    if (strcmp(c->hidden_act, "silu") != 0)
        return zy_fail("%s: hidden_act = \"%s\" is not supported (only \"silu\")", source,
                       c->hidden_act);
    if (!(c->rms_norm_eps > 0) || !isfinite(c->rms_norm_eps))
        return zy_fail("%s: rms_norm_eps = %g, must be positive", source, c->rms_norm_eps);
    if (!(c->initializer_range >= 0) || !isfinite(c->initializer_range))
        return zy_fail("%s: initializer_range = %g, must be non-negative", source,
                       c->initializer_range);
    if (c->sliding_window < 0)
        return zy_fail("%s: sliding_window = %d, must be positive or null", source,
                       c->sliding_window);
    if (c->pad_token_id < -1 || c->pad_token_id >= c->vocab_size)
        return zy_fail("%s: pad_token_id = %d is outside the vocabulary [0, %d)", source,
                       c->pad_token_id, c->vocab_size);
    if (c->bos_token_id < -1) return zy_fail("%s: bos_token_id = %d", source, c->bos_token_id);
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_token_ids[i] < 0)
            return zy_fail("%s: eos_token_id = %d", source, c->eos_token_ids[i]);
    if (!(c->attention_dropout >= 0 && c->attention_dropout < 1))
        return zy_fail("%s: attention_dropout = %g, must be in [0, 1)", source,
                       c->attention_dropout);
    int used[2] = {0, 0};
    for (int l = 0; l < c->num_hidden_layers; l++) {
        if (c->layer_types[l] > ZY_LAYER_HYBRID_SLIDING)
            return zy_fail("%s: layer_types[%d] = %d is not a layer type", source, l,
                           c->layer_types[l]);
        used[c->layer_types[l]] = 1;
    }
    if (used[ZY_LAYER_HYBRID_SLIDING] && c->sliding_window < 1)
        return zy_fail(
            "%s: layer_types has \"hybrid_sliding\" layers but sliding_window is not set", source);
    for (int t = 0; t < 2; t++) {
        const zy_rope_params *r = &c->rope[t];
        const char *tn = layer_type_names[t];
        if (!r->present) {
            if (used[t])
                return zy_fail("%s: rope_parameters has no \"%s\" entry but layer_types uses it",
                               source, tn);
            continue;
        }
        if (!(r->theta > 0) || !isfinite(r->theta))
            return zy_fail("%s: rope_parameters.%s.rope_theta = %g, must be positive", source, tn,
                           r->theta);
        if (!(r->partial_rotary_factor > 0 && r->partial_rotary_factor <= 1))
            return zy_fail("%s: rope_parameters.%s.partial_rotary_factor = %g, must be in (0, 1]",
                           source, tn, r->partial_rotary_factor);
        /* HF rotates int(head_dim * factor) channels in rotate-half pairs. */
        int rot = (int)(c->head_dim * r->partial_rotary_factor);
        if (rot < 2 || rot % 2 != 0)
            return zy_fail("%s: rope_parameters.%s: rotary width int(head_dim %d * "
                           "partial_rotary_factor %g) = %d must be even and at least 2",
                           source, tn, c->head_dim, r->partial_rotary_factor, rot);
    }
    return check_sizes(c, source);
}

/* The widths the model's code computes in int (forward.c, backward.c: C = (Hq+Hk)*d, 2F, E+1)
 * must fit one, and the whole parameter table must fit memory that could exist: a config past
 * either is refused here, before anything is sized by it (a wrapped count would make a buffer
 * smaller than the writes into it). The table is built with overflow-checked sizes. */
static int check_sizes(const zy_config *c, const char *source) {
    const int64_t d = c->head_dim, heads = (int64_t)c->num_attention_heads + c->num_key_value_heads;
    const struct {
        const char *what;
        int64_t v;
    } widths[] = {
        {"(num_attention_heads + num_key_value_heads) * head_dim", heads * d},
        {"2 * moe_intermediate_size", 2 * (int64_t)c->moe_intermediate_size},
        {"num_experts + 1", (int64_t)c->num_experts + 1},
    };
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        if (widths[i].v > INT_MAX)
            return zy_fail("%s: %s = %lld, more than the %d a width may be", source, widths[i].what,
                           (long long)widths[i].v, INT_MAX);
    zy_param_table t;
    model_build_table(&t, c);
    const int overflow = t.overflow;
    const size_t total = t.total;
    params_free(&t);
    if (overflow)
        return zy_fail("%s: the parameter count overflows 64 bits: the sizes (hidden_size %d, "
                       "num_experts %d, moe_intermediate_size %d, vocab_size %d, ...) are far too "
                       "large",
                       source, c->hidden_size, c->num_experts, c->moe_intermediate_size,
                       c->vocab_size);
    if (total > ZY_MAX_PARAMS)
        return zy_fail("%s: %.4g parameters, more than zayac holds (at most 2^%d = %.3g)", source,
                       (double)total, ZY_MAX_PARAMS_LOG2, (double)ZY_MAX_PARAMS);
    return ZY_OK;
}

int config_rotary_dim(const zy_config *c, int layer) {
    ZY_CHECK(layer >= 0 && layer < c->num_hidden_layers);
    const zy_rope_params *r = &c->rope[c->layer_types[layer]];
    return (int)(c->head_dim * r->partial_rotary_factor);
}

/* ---- parsing ---- */

typedef struct {
    const char *source;
} cfg_ctx;

static const char *json_kind(const cJSON *v) {
    if (cJSON_IsNull(v)) return "null";
    if (cJSON_IsBool(v)) return "a boolean";
    if (cJSON_IsNumber(v)) return "a number";
    if (cJSON_IsString(v)) return "a string";
    if (cJSON_IsArray(v)) return "a list";
    if (cJSON_IsObject(v)) return "an object";
    return "an unknown value";
}

/* The value of a key; when a key repeats the last one wins, as in Python's json module (which is
 * what transformers reads config.json with). */
static const cJSON *json_get(const cJSON *o, const char *key) {
    const cJSON *found = NULL, *e;
    cJSON_ArrayForEach(e, o) {
        if (e->string && strcmp(e->string, key) == 0) found = e;
    }
    return found;
}

/* An integer that fits in int (JSON numbers are doubles; 2048.5 or 1e12 are refused). */
static int json_to_int(const cJSON *v, int *out) {
    if (!cJSON_IsNumber(v)) return 0;
    double d = v->valuedouble;
    if (d != floor(d) || d < INT_MIN || d > INT_MAX) return 0;
    *out = (int)d;
    return 1;
}

static int get_int(const cJSON *o, const char *key, int *out, const char *src) {
    const cJSON *v = json_get(o, key);
    if (!v) return ZY_OK;
    if (!json_to_int(v, out)) {
        if (cJSON_IsNumber(v))
            return zy_fail("%s: %s = %g is not an integer in the int range", src, key,
                           v->valuedouble);
        return zy_fail("%s: %s: expected an integer, found %s", src, key, json_kind(v));
    }
    return ZY_OK;
}

/* An integer or null (null becomes `if_null`). */
static int get_int_or_null(const cJSON *o, const char *key, int *out, int if_null,
                           const char *src) {
    const cJSON *v = json_get(o, key);
    if (v && cJSON_IsNull(v)) {
        *out = if_null;
        return ZY_OK;
    }
    return get_int(o, key, out, src);
}

static int get_token_id(const cJSON *o, const char *key, int *out, const char *src) {
    const cJSON *v = json_get(o, key);
    if (!v) return ZY_OK;
    if (cJSON_IsNull(v)) {
        *out = -1;
        return ZY_OK;
    }
    if (!json_to_int(v, out) || *out < 0)
        return zy_fail("%s: %s: expected a non-negative integer or null, found %s", src, key,
                       cJSON_IsNumber(v) ? "a negative or fractional number" : json_kind(v));
    return ZY_OK;
}

static int get_bool(const cJSON *o, const char *key, int *out, const char *src) {
    const cJSON *v = json_get(o, key);
    if (!v) return ZY_OK;
    if (!cJSON_IsBool(v))
        return zy_fail("%s: %s: expected true or false, found %s", src, key, json_kind(v));
    *out = cJSON_IsTrue(v) ? 1 : 0;
    return ZY_OK;
}

static int get_double(const cJSON *o, const char *key, double *out, const char *src) {
    const cJSON *v = json_get(o, key);
    if (!v) return ZY_OK;
    if (!cJSON_IsNumber(v))
        return zy_fail("%s: %s: expected a number, found %s", src, key, json_kind(v));
    *out = v->valuedouble;
    return ZY_OK;
}

/* One layer type's entry: rope_theta required, partial_rotary_factor defaulting to 1.0 as HF's
 * compute_default_rope_parameters does, rope_type "default" (the only kind implemented). */
static int parse_rope_entry(const cJSON *e, const char *where, zy_rope_params *r, const char *src) {
    if (!cJSON_IsObject(e))
        return zy_fail("%s: %s: expected an object, found %s", src, where, json_kind(e));
    const cJSON *type = json_get(e, "rope_type");
    if (type && !cJSON_IsNull(type)) {
        if (!cJSON_IsString(type))
            return zy_fail("%s: %s.rope_type: expected a string, found %s", src, where,
                           json_kind(type));
        if (strcmp(type->valuestring, "default") != 0)
            return zy_fail("%s: %s.rope_type = \"%s\" is not supported (only \"default\")", src,
                           where, type->valuestring);
    }
    char key[96];
    const cJSON *th = json_get(e, "rope_theta");
    if (!th) return zy_fail("%s: %s has no rope_theta", src, where);
    snprintf(key, sizeof key, "%s.rope_theta", where);
    if (!cJSON_IsNumber(th))
        return zy_fail("%s: %s: expected a number, found %s", src, key, json_kind(th));
    r->theta = th->valuedouble;
    r->partial_rotary_factor = 1.0;
    const cJSON *pf = json_get(e, "partial_rotary_factor");
    snprintf(key, sizeof key, "%s.partial_rotary_factor", where);
    if (pf && !cJSON_IsNumber(pf))
        return zy_fail("%s: %s: expected a number, found %s", src, key, json_kind(pf));
    if (pf) r->partial_rotary_factor = pf->valuedouble;
    r->present = 1;
    return ZY_OK;
}

/* rope_parameters nested by layer type ({"hybrid": {...}, "hybrid_sliding": {...}}), flat
 * ({"rope_theta": .., "partial_rotary_factor": ..}, applied to both types), or absent: then legacy
 * top-level rope_theta / partial_rotary_factor apply to both types, else HF's defaults stay.
 * (transformers itself ignores the legacy keys and fails on a flat dict; we accept both so older
 * configs load, and always write the nested form.) */
static int parse_rope(const cJSON *root, zy_config *c, const char *src) {
    const cJSON *rp = json_get(root, "rope_parameters");
    if (rp && !cJSON_IsNull(rp)) {
        if (!cJSON_IsObject(rp))
            return zy_fail("%s: rope_parameters: expected an object, found %s", src, json_kind(rp));
        const cJSON *h = json_get(rp, "hybrid");
        const cJSON *s = json_get(rp, "hybrid_sliding");
        if (h || s) { /* nested; a stray top-level "rope_type" (seen on the hub) is ignored */
            c->rope[0].present = c->rope[1].present = 0;
            if (h) ZY_TRY(parse_rope_entry(h, "rope_parameters.hybrid", &c->rope[0], src));
            if (s) ZY_TRY(parse_rope_entry(s, "rope_parameters.hybrid_sliding", &c->rope[1], src));
            return ZY_OK;
        }
        ZY_TRY(parse_rope_entry(rp, "rope_parameters", &c->rope[0], src));
        c->rope[1] = c->rope[0];
        return ZY_OK;
    }
    const cJSON *th = json_get(root, "rope_theta");
    const cJSON *pf = json_get(root, "partial_rotary_factor");
    if (!th && !pf) return ZY_OK;
    for (int t = 0; t < 2; t++) {
        ZY_TRY(get_double(root, "rope_theta", &c->rope[t].theta, src));
        ZY_TRY(get_double(root, "partial_rotary_factor", &c->rope[t].partial_rotary_factor, src));
        c->rope[t].present = 1;
    }
    return ZY_OK;
}

static int parse_layer_types(const cJSON *root, zy_config *c, const char *src) {
    const cJSON *lt = json_get(root, "layer_types");
    if (!lt || cJSON_IsNull(lt)) { /* HF: every layer "hybrid" */
        memset(c->layer_types, ZY_LAYER_HYBRID, sizeof c->layer_types);
        return ZY_OK;
    }
    if (!cJSON_IsArray(lt))
        return zy_fail("%s: layer_types: expected a list, found %s", src, json_kind(lt));
    int n = cJSON_GetArraySize(lt);
    if (n != c->num_hidden_layers)
        return zy_fail("%s: layer_types has %d entries but num_hidden_layers = %d", src, n,
                       c->num_hidden_layers);
    if (n > ZY_MAX_LAYERS)
        return zy_fail("%s: layer_types has %d entries, at most %d supported", src, n,
                       ZY_MAX_LAYERS);
    int i = 0;
    const cJSON *e;
    cJSON_ArrayForEach(e, lt) {
        if (cJSON_IsString(e) && strcmp(e->valuestring, "hybrid") == 0)
            c->layer_types[i] = ZY_LAYER_HYBRID;
        else if (cJSON_IsString(e) && strcmp(e->valuestring, "hybrid_sliding") == 0)
            c->layer_types[i] = ZY_LAYER_HYBRID_SLIDING;
        else if (cJSON_IsString(e))
            return zy_fail(
                "%s: layer_types[%d] = \"%s\", expected \"hybrid\" or \"hybrid_sliding\"", src, i,
                e->valuestring);
        else
            return zy_fail("%s: layer_types[%d]: expected a string, found %s", src, i,
                           json_kind(e));
        i++;
    }
    return ZY_OK;
}

/* Line and column (1-based) of a byte offset, for parse errors. */
static void text_position(const char *text, size_t at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (size_t i = 0; i < at && text[i]; i++) {
        if (text[i] == '\n') {
            (*line)++;
            *col = 1;
        } else
            (*col)++;
    }
}

int config_parse_json(zy_config *c, const char *json, const char *source) {
    config_defaults(c);
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(json, &end, 1);
    if (!root) {
        int line, col;
        size_t at = end && end >= json ? (size_t)(end - json) : 0;
        text_position(json, at, &line, &col);
        return zy_fail("%s: not valid JSON (the parser stopped at line %d, column %d)", source,
                       line, col);
    }
    int rc = ZY_ERR;
    if (!cJSON_IsObject(root)) {
        zy_fail("%s: expected a JSON object, found %s", source, json_kind(root));
        goto done;
    }
    const cJSON *mt = json_get(root, "model_type");
    if (mt && !(cJSON_IsString(mt) && strcmp(mt->valuestring, "zaya") == 0)) {
        if (cJSON_IsString(mt))
            zy_fail("%s: model_type = \"%s\", expected \"zaya\"", source, mt->valuestring);
        else
            zy_fail("%s: model_type: expected the string \"zaya\", found %s", source,
                    json_kind(mt));
        goto done;
    }
    const struct {
        const char *key;
        int *dst;
    } ints[] = {
        {"vocab_size", &c->vocab_size},
        {"hidden_size", &c->hidden_size},
        {"num_hidden_layers", &c->num_hidden_layers},
        {"num_attention_heads", &c->num_attention_heads},
        {"num_key_value_heads", &c->num_key_value_heads},
        {"head_dim", &c->head_dim},
        {"num_experts", &c->num_experts},
        {"num_experts_per_tok", &c->num_experts_per_tok},
        {"moe_intermediate_size", &c->moe_intermediate_size},
        {"router_hidden_size", &c->router_hidden_size},
        {"max_position_embeddings", &c->max_position_embeddings},
        {"cca_time0", &c->cca_time0},
        {"cca_time1", &c->cca_time1},
    };
    for (size_t i = 0; i < sizeof ints / sizeof ints[0]; i++)
        if (get_int(root, ints[i].key, ints[i].dst, source) != ZY_OK) goto done;
    if (get_int_or_null(root, "sliding_window", &c->sliding_window, 0, source) != ZY_OK ||
        get_bool(root, "tie_word_embeddings", &c->tie_word_embeddings, source) != ZY_OK ||
        get_bool(root, "attention_bias", &c->attention_bias, source) != ZY_OK ||
        get_bool(root, "lm_head_bias", &c->lm_head_bias, source) != ZY_OK ||
        get_token_id(root, "pad_token_id", &c->pad_token_id, source) != ZY_OK ||
        get_token_id(root, "bos_token_id", &c->bos_token_id, source) != ZY_OK ||
        get_double(root, "rms_norm_eps", &c->rms_norm_eps, source) != ZY_OK ||
        get_double(root, "initializer_range", &c->initializer_range, source) != ZY_OK)
        goto done;
    if (c->sliding_window == 0 && json_get(root, "sliding_window") &&
        !cJSON_IsNull(json_get(root, "sliding_window"))) {
        zy_fail("%s: sliding_window = 0, must be positive or null", source);
        goto done;
    }
    /* eos_token_id: an id, a list of ids (every one kept), or null. */
    const cJSON *eos = json_get(root, "eos_token_id");
    if (eos && cJSON_IsArray(eos)) {
        config_set_eos(c, -1);
        c->eos_is_list = 1;
        const cJSON *e;
        cJSON_ArrayForEach(e, eos) {
            int v;
            if (!json_to_int(e, &v) || v < 0) {
                zy_fail("%s: eos_token_id[%d]: expected a non-negative integer, found %s", source,
                        c->n_eos, json_kind(e));
                goto done;
            }
            if (c->n_eos == ZY_MAX_EOS) {
                zy_fail("%s: eos_token_id lists more than %d ids", source, ZY_MAX_EOS);
                goto done;
            }
            c->eos_token_ids[c->n_eos++] = v;
        }
    } else if (eos) {
        int id = -1;
        if (get_token_id(root, "eos_token_id", &id, source) != ZY_OK) goto done;
        config_set_eos(c, id);
    }
    if (get_double(root, "attention_dropout", &c->attention_dropout, source) != ZY_OK) goto done;
    /* dtype (torch_dtype in older files): what the weights are stored as; informative only */
    const cJSON *dt =
        json_get(root, "dtype") ? json_get(root, "dtype") : json_get(root, "torch_dtype");
    if (dt && !cJSON_IsNull(dt)) {
        if (!cJSON_IsString(dt) ||
            (strcmp(dt->valuestring, "float32") && strcmp(dt->valuestring, "bfloat16") &&
             strcmp(dt->valuestring, "float16"))) {
            zy_fail("%s: dtype: expected \"float32\", \"bfloat16\" or \"float16\"", source);
            goto done;
        }
        memset(c->dtype, 0, sizeof c->dtype);
        memcpy(c->dtype, dt->valuestring, strlen(dt->valuestring));
    }
    const cJSON *act = json_get(root, "hidden_act");
    if (act) {
        if (!cJSON_IsString(act)) {
            zy_fail("%s: hidden_act: expected a string, found %s", source, json_kind(act));
            goto done;
        }
        if (strlen(act->valuestring) >= sizeof c->hidden_act) {
            zy_fail("%s: hidden_act = \"%.40s\" is not supported (only \"silu\")", source,
                    act->valuestring);
            goto done;
        }
        memset(c->hidden_act, 0, sizeof c->hidden_act);
        memcpy(c->hidden_act, act->valuestring, strlen(act->valuestring));
    }
    if (parse_rope(root, c, source) != ZY_OK || parse_layer_types(root, c, source) != ZY_OK)
        goto done;
    rc = ZY_OK;
done:
    cJSON_Delete(root);
    return rc;
}

int config_load(zy_config *c, const char *path) {
    char file[4096];
    struct stat st;
    if (stat(path, &st) == 0 && S_ISDIR(st.st_mode))
        ZY_TRY(zy_path_join(file, sizeof file, path, "config.json"));
    else if ((size_t)snprintf(file, sizeof file, "%s", path) >= sizeof file)
        return zy_fail("%s: path too long", path);
    char *text;
    ZY_TRY(zy_read_file(file, &text, NULL));
    int rc = config_parse_json(c, text, file);
    free(text);
    if (rc == ZY_OK) rc = config_validate(c, file);
    return rc;
}

int config_is_eos(const zy_config *c, int id) {
    for (int i = 0; i < c->n_eos; i++)
        if (c->eos_token_ids[i] == id) return 1;
    return 0;
}

void config_set_eos(zy_config *c, int id) {
    memset(c->eos_token_ids, 0, sizeof c->eos_token_ids); /* unused slots compare equal */
    c->n_eos = id >= 0;
    c->eos_token_ids[0] = id;
    c->eos_is_list = 0;
}

/* ---- writing ---- */

typedef struct {
    char *s;
    size_t n, cap;
} sbuf;

static void sb_printf(sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void sb_printf(sbuf *b, const char *fmt, ...) {
    for (;;) {
        va_list ap;
        va_start(ap, fmt);
        int k = vsnprintf(b->s + b->n, b->cap - b->n, fmt, ap);
        va_end(ap);
        ZY_CHECK(k >= 0);
        if ((size_t)k < b->cap - b->n) {
            b->n += (size_t)k;
            return;
        }
        b->cap = 2 * b->cap + (size_t)k + 64;
        b->s = zy_realloc(b->s, b->cap);
    }
}

/* A double as Python's repr writes it: the shortest digits that read back exactly, plain notation
 * for exponents -4..15 ("10000.0", "0.02"), scientific otherwise ("1e-05"). */
static void sb_double(sbuf *b, double v) {
    char e[40];
    int p = 1;
    for (; p < 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, v);
        if (strtod(e, NULL) == v) break;
    }
    snprintf(e, sizeof e, "%.*e", p - 1, v);
    int x = atoi(strchr(e, 'e') + 1);
    if (x >= -4 && x < 16) {
        char f[64];
        snprintf(f, sizeof f, "%.*f", p - 1 - x > 0 ? p - 1 - x : 0, v);
        sb_printf(b, strchr(f, '.') ? "%s" : "%s.0", f);
    } else {
        sb_printf(b, "%s", e);
    }
}

static void sb_token(sbuf *b, const char *key, int v) {
    if (v < 0)
        sb_printf(b, "  \"%s\": null,\n", key);
    else
        sb_printf(b, "  \"%s\": %d,\n", key, v);
}

static void sb_bool(sbuf *b, const char *key, int v) {
    sb_printf(b, "  \"%s\": %s,\n", key, v ? "true" : "false");
}

static void sb_int(sbuf *b, const char *key, int v) {
    sb_printf(b, "  \"%s\": %d,\n", key, v);
}

char *config_to_json(const zy_config *c) {
    /* Keys sorted as transformers writes them; every ZayaConfig field is present so the file reads
     * the same whatever that version's defaults are. */
    sbuf b = {zy_malloc(4096), 0, 4096};
    b.s[0] = 0;
    sb_printf(&b, "{\n  \"architectures\": [\n    \"ZayaForCausalLM\"\n  ],\n");
    sb_bool(&b, "attention_bias", c->attention_bias);
    sb_printf(&b, "  \"attention_dropout\": ");
    sb_double(&b, c->attention_dropout);
    sb_printf(&b, ",\n");
    sb_token(&b, "bos_token_id", c->bos_token_id);
    sb_int(&b, "cca_time0", c->cca_time0);
    sb_int(&b, "cca_time1", c->cca_time1);
    sb_printf(&b, "  \"dtype\": \"%s\",\n", c->dtype);
    if (c->eos_is_list) {
        sb_printf(&b, "  \"eos_token_id\": [");
        for (int i = 0; i < c->n_eos; i++)
            sb_printf(&b, "%s%d", i ? ", " : "", c->eos_token_ids[i]);
        sb_printf(&b, "],\n");
    } else {
        sb_token(&b, "eos_token_id", c->n_eos ? c->eos_token_ids[0] : -1);
    }
    sb_int(&b, "head_dim", c->head_dim);
    sb_printf(&b, "  \"hidden_act\": \"%s\",\n", c->hidden_act);
    sb_int(&b, "hidden_size", c->hidden_size);
    sb_printf(&b, "  \"initializer_range\": ");
    sb_double(&b, c->initializer_range);
    sb_printf(&b, ",\n  \"layer_types\": [");
    for (int l = 0; l < c->num_hidden_layers; l++)
        sb_printf(&b, "%s\n    \"%s\"", l ? "," : "",
                  layer_type_names[c->layer_types[l] == ZY_LAYER_HYBRID_SLIDING]);
    sb_printf(&b, "\n  ],\n");
    sb_bool(&b, "lm_head_bias", c->lm_head_bias);
    sb_int(&b, "max_position_embeddings", c->max_position_embeddings);
    sb_printf(&b, "  \"model_type\": \"zaya\",\n");
    sb_int(&b, "moe_intermediate_size", c->moe_intermediate_size);
    sb_int(&b, "num_attention_heads", c->num_attention_heads);
    sb_int(&b, "num_experts", c->num_experts);
    sb_int(&b, "num_experts_per_tok", c->num_experts_per_tok);
    sb_int(&b, "num_hidden_layers", c->num_hidden_layers);
    sb_int(&b, "num_key_value_heads", c->num_key_value_heads);
    sb_bool(&b, "output_router_logits", 0);
    sb_token(&b, "pad_token_id", c->pad_token_id);
    sb_printf(&b, "  \"rms_norm_eps\": ");
    sb_double(&b, c->rms_norm_eps);
    sb_printf(&b, ",\n  \"rope_parameters\": {");
    int first = 1;
    for (int t = 0; t < 2; t++) {
        if (!c->rope[t].present) continue;
        sb_printf(&b, "%s\n    \"%s\": {\n      \"partial_rotary_factor\": ", first ? "" : ",",
                  layer_type_names[t]);
        sb_double(&b, c->rope[t].partial_rotary_factor);
        sb_printf(&b, ",\n      \"rope_theta\": ");
        sb_double(&b, c->rope[t].theta);
        sb_printf(&b, ",\n      \"rope_type\": \"default\"\n    }");
        first = 0;
    }
    sb_printf(&b, "\n  },\n");
    sb_int(&b, "router_hidden_size", c->router_hidden_size);
    if (c->sliding_window > 0)
        sb_int(&b, "sliding_window", c->sliding_window);
    else
        sb_printf(&b, "  \"sliding_window\": null,\n");
    sb_bool(&b, "tie_word_embeddings", c->tie_word_embeddings);
    sb_bool(&b, "use_cache", 1);
    sb_printf(&b, "  \"vocab_size\": %d\n}\n", c->vocab_size);
    return b.s;
}

int config_save(const zy_config *c, const char *dir) {
    char file[4096];
    ZY_TRY(zy_path_join(file, sizeof file, dir, "config.json"));
    if (config_validate(c, file) != ZY_OK)
        return zy_fail_ctx("refusing to write an invalid config");
    ZY_TRY(zy_mkdirs(dir));
    char *text = config_to_json(c);
    int rc = zy_write_file_atomic(file, text, strlen(text));
    free(text);
    return rc;
}

/* ---- presets ---- */

/* configs/zaya1-base.json */
static const char zaya1_base_json[] =
    "{\"model_type\": \"zaya\", \"vocab_size\": 262272, \"hidden_size\": 2048, "
    "\"num_hidden_layers\": 40, \"num_attention_heads\": 8, \"num_key_value_heads\": 2, "
    "\"head_dim\": 128, \"num_experts\": 16, \"num_experts_per_tok\": 1, "
    "\"moe_intermediate_size\": 2048, \"router_hidden_size\": 256, "
    "\"max_position_embeddings\": 4096, \"cca_time0\": 2, \"cca_time1\": 2, "
    "\"rms_norm_eps\": 1e-05, \"initializer_range\": 0.02, \"pad_token_id\": 0, "
    "\"bos_token_id\": 2, \"eos_token_id\": 1, \"rope_parameters\": {"
    "\"hybrid\": {\"rope_type\": \"default\", \"rope_theta\": 10000.0, "
    "\"partial_rotary_factor\": 0.5}, \"hybrid_sliding\": {\"rope_type\": \"default\", "
    "\"rope_theta\": 10000.0, \"partial_rotary_factor\": 0.5}}}";

/* Built-in copies of configs/<name>.json, so the binary works from any directory. A test checks
 * that each equals its file. */
static const struct {
    const char *name, *json;
    int layers; /* > 0: num_hidden_layers instead of the JSON's (a cut of a larger preset) */
} builtin_presets[] = {
    {"tiny",
     "{\"model_type\": \"zaya\", \"vocab_size\": 4096, \"hidden_size\": 128, "
     "\"num_hidden_layers\": 4, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, "
     "\"head_dim\": 32, \"num_experts\": 4, \"num_experts_per_tok\": 1, "
     "\"moe_intermediate_size\": 128, \"router_hidden_size\": 32, "
     "\"max_position_embeddings\": 2048, \"cca_time0\": 2, \"cca_time1\": 2, "
     "\"rms_norm_eps\": 1e-05, \"initializer_range\": 0.02, \"pad_token_id\": 0, "
     "\"bos_token_id\": 2, \"eos_token_id\": 1, \"rope_parameters\": {"
     "\"hybrid\": {\"rope_type\": \"default\", \"rope_theta\": 10000.0, "
     "\"partial_rotary_factor\": 0.5}, \"hybrid_sliding\": {\"rope_type\": \"default\", "
     "\"rope_theta\": 10000.0, \"partial_rotary_factor\": 0.5}}}",
     0},
    {"bench-small",
     "{\"model_type\": \"zaya\", \"vocab_size\": 32768, \"hidden_size\": 1024, "
     "\"num_hidden_layers\": 12, \"num_attention_heads\": 8, \"num_key_value_heads\": 2, "
     "\"head_dim\": 128, \"num_experts\": 16, \"num_experts_per_tok\": 1, "
     "\"moe_intermediate_size\": 1024, \"router_hidden_size\": 256, "
     "\"max_position_embeddings\": 2048, \"cca_time0\": 2, \"cca_time1\": 2, "
     "\"rms_norm_eps\": 1e-05, \"initializer_range\": 0.02, \"pad_token_id\": 0, "
     "\"bos_token_id\": 2, \"eos_token_id\": 106, \"rope_parameters\": {"
     "\"hybrid\": {\"rope_type\": \"default\", \"rope_theta\": 5000000.0, "
     "\"partial_rotary_factor\": 0.5}, \"hybrid_sliding\": {\"rope_type\": \"default\", "
     "\"rope_theta\": 10000.0, \"partial_rotary_factor\": 0.5}}}",
     0},
    {"zaya1-base", zaya1_base_json, 0},
    {"bench-base", zaya1_base_json, 8}, /* zaya1-base's widths, 8 layers (issue 19) */
};
#define N_BUILTIN ((int)(sizeof builtin_presets / sizeof builtin_presets[0]))

const char *config_preset_name(int i) {
    return i >= 0 && i < N_BUILTIN ? builtin_presets[i].name : NULL;
}

int config_preset_builtin(zy_config *c, const char *name) {
    for (int i = 0; i < N_BUILTIN; i++) {
        if (strcmp(builtin_presets[i].name, name) != 0) continue;
        char src[96];
        snprintf(src, sizeof src, "built-in preset %s", name);
        ZY_TRY(config_parse_json(c, builtin_presets[i].json, src));
        if (builtin_presets[i].layers > 0) c->num_hidden_layers = builtin_presets[i].layers;
        return config_validate(c, src);
    }
    return zy_fail("preset '%s': unknown (known: tiny, bench-small, bench-base, zaya1-base)", name);
}

/* Looks for ROOT/configs/<name>.json; returns 1 and fills `out` when the file exists. */
static int preset_file_in(const char *root, const char *name, char *out, size_t n) {
    if (!root || !*root) return 0;
    if ((size_t)snprintf(out, n, "%s/configs/%s.json", root, name) >= n) return 0;
    struct stat st;
    return stat(out, &st) == 0 && S_ISREG(st.st_mode);
}

int config_preset_path(const char *name, char *out, size_t n) {
    if (preset_file_in(getenv("ZAYAC_ROOT"), name, out, n)) return 1;
    if (preset_file_in(".", name, out, n)) return 1;
    /* The executable's folder and up to three parents: build/zayac, build-san/tests/test_x. */
    char exe[4096];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k <= 0) return 0;
    exe[k] = 0;
    for (int up = 0; up < 4; up++) {
        char *slash = strrchr(exe, '/');
        if (!slash || slash == exe) return 0;
        *slash = 0;
        if (preset_file_in(exe, name, out, n)) return 1;
    }
    return 0;
}

int config_preset(zy_config *c, const char *name) {
    for (const char *p = name; *p; p++)
        if (!((*p >= 'a' && *p <= 'z') || (*p >= '0' && *p <= '9') || *p == '-' || *p == '_'))
            return zy_fail("preset '%s': a preset name has only a-z, 0-9, '-' and '_'", name);
    if (!*name) return zy_fail("preset '': empty name");
    char path[4096];
    if (config_preset_path(name, path, sizeof path)) return config_load(c, path);
    return config_preset_builtin(c, name);
}
