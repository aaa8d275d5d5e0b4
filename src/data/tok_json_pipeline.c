/* The normalizer, pre_tokenizer and decoder of a tokenizer.json, read into the tokenizer's stage
 * lists (Sequences flattened: applying a Sequence is applying its members in turn). A component
 * zayac does not implement is an error naming it and the ones it does. */
#include "base/err.h"
#include "data/tok_internal.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cJSON *get(const cJSON *o, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

static int is_null(const cJSON *j) {
    return !j || cJSON_IsNull(j);
}

/* The "type" of a component object. */
static int type_of(const char *path, const char *where, const cJSON *j, const char **type) {
    const cJSON *ty = cJSON_IsObject(j) ? get(j, "type") : NULL;
    if (!cJSON_IsString(ty))
        return zy_fail("%s: %s should be an object with a \"type\" (or null)", path, where);
    *type = ty->valuestring;
    return ZY_OK;
}

static int get_string(const char *path, const char *where, const cJSON *o, const char *key,
                      const char **out) {
    const cJSON *v = get(o, key);
    if (!cJSON_IsString(v)) return zy_fail("%s: %s.%s should be a string", path, where, key);
    *out = v->valuestring;
    return ZY_OK;
}

static int get_flag(const char *path, const char *where, const cJSON *o, const char *key, int def,
                    int *out) {
    const cJSON *v = get(o, key);
    if (is_null(v))
        *out = def;
    else if (cJSON_IsBool(v))
        *out = cJSON_IsTrue(v);
    else
        return zy_fail("%s: %s.%s should be true or false", path, where, key);
    return ZY_OK;
}

static int get_count(const char *path, const char *where, const cJSON *o, const char *key,
                     size_t *out) {
    const cJSON *v = get(o, key);
    double d = cJSON_IsNumber(v) ? v->valuedouble : -1;
    if (d < 0 || d > 1e9 || floor(d) != d)
        return zy_fail("%s: %s.%s should be a non-negative integer", path, where, key);
    *out = (size_t)d;
    return ZY_OK;
}

/* A string field holding exactly one character (Rust's char), as UTF-8 in out[5]. */
static int get_char(const char *path, const char *where, const cJSON *o, const char *key,
                    char out[5], size_t *len) {
    const char *s = NULL;
    ZY_TRY(get_string(path, where, o, key, &s));
    uint32_t cp;
    int n = utf8_decode((const uint8_t *)s, strlen(s), &cp);
    if (n == 0 || s[n] != 0)
        return zy_fail("%s: %s.%s should be one character, found \"%.20s\"", path, where, key, s);
    memcpy(out, s, (size_t)n);
    out[n] = 0;
    *len = (size_t)n;
    return ZY_OK;
}

/* A {"String": s} or {"Regex": r} pattern. */
static int get_pattern(const char *path, const char *where, const cJSON *o, tok_pattern *p) {
    const cJSON *pat = get(o, "pattern"), *s = cJSON_IsObject(pat) ? get(pat, "String") : NULL,
                *r = cJSON_IsObject(pat) ? get(pat, "Regex") : NULL;
    if (!cJSON_IsString(s) == !cJSON_IsString(r))
        return zy_fail("%s: %s.pattern should be {\"String\": ...} or {\"Regex\": ...}", path,
                       where);
    char at[512];
    snprintf(at, sizeof at, "%s: %s.pattern", path, where);
    const char *text = cJSON_IsString(s) ? s->valuestring : r->valuestring;
    return tok_pattern_init(p, text, strlen(text), cJSON_IsString(r), at);
}

static int get_scheme(const char *path, const char *where, const cJSON *o,
                      tok_prepend_scheme *out) {
    const cJSON *v = get(o, "prepend_scheme");
    *out = PREPEND_ALWAYS; /* HF's default */
    if (!is_null(v)) {
        const char *s = cJSON_IsString(v) ? v->valuestring : "";
        if (!strcmp(s, "always"))
            *out = PREPEND_ALWAYS;
        else if (!strcmp(s, "first"))
            *out = PREPEND_FIRST;
        else if (!strcmp(s, "never"))
            *out = PREPEND_NEVER;
        else
            return zy_fail("%s: %s.prepend_scheme should be \"always\", \"first\" or \"never\"",
                           path, where);
    }
    const cJSON *legacy = get(o, "add_prefix_space"); /* older files: false means never */
    if (cJSON_IsFalse(legacy)) {
        if (*out != PREPEND_NEVER)
            return zy_fail("%s: %s.add_prefix_space is false but prepend_scheme is not \"never\" "
                           "(HF refuses this too)",
                           path, where);
    }
    return ZY_OK;
}

/* Each member of a Sequence's list, by parse. */
static int each_member(const char *path, const char *where, const cJSON *j, const char *key,
                       int (*parse)(const char *, const cJSON *, zy_tokenizer *), zy_tokenizer *t) {
    const cJSON *list = get(j, key);
    if (!cJSON_IsArray(list))
        return zy_fail("%s: %s Sequence needs a \"%s\" list", path, where, key);
    for (const cJSON *it = list->child; it; it = it->next) {
        if (is_null(it)) return zy_fail("%s: %s Sequence holds a null", path, where);
        ZY_TRY(parse(path, it, t));
    }
    return ZY_OK;
}

int tok_parse_normalizer(const char *path, const cJSON *j, zy_tokenizer *t) {
    if (is_null(j)) return ZY_OK;
    const char *type;
    ZY_TRY(type_of(path, "normalizer", j, &type));
    if (!strcmp(type, "Sequence"))
        return each_member(path, "normalizer", j, "normalizers", tok_parse_normalizer, t);
    tok_norm n = {0};
    const char *content = NULL;
    if (!strcmp(type, "Replace")) {
        n.kind = TOKN_REPLACE;
        ZY_TRY(get_string(path, "normalizer Replace", j, "content", &content));
        ZY_TRY(get_pattern(path, "normalizer Replace", j, &n.pat));
    } else if (!strcmp(type, "Prepend")) {
        n.kind = TOKN_PREPEND;
        ZY_TRY(get_string(path, "normalizer Prepend", j, "prepend", &content));
    } else {
        return zy_fail("%s: normalizer \"%s\" is not supported (zayac implements Replace, Prepend "
                       "and Sequence of them)",
                       path, type);
    }
    n.content_len = strlen(content);
    n.content = zy_strdup(content);
    t->norms = zy_realloc(t->norms, (size_t)(t->n_norms + 1) * sizeof *t->norms);
    t->norms[t->n_norms++] = n;
    return ZY_OK;
}

static int parse_split_behavior(const char *path, const cJSON *j, tok_split_behavior *out) {
    static const char *const names[] = {"Removed", "Isolated", "MergedWithPrevious",
                                        "MergedWithNext", "Contiguous"};
    const cJSON *v = get(j, "behavior");
    for (int i = 0; i < 5; i++)
        if (cJSON_IsString(v) && !strcmp(v->valuestring, names[i])) {
            *out = (tok_split_behavior)i;
            return ZY_OK;
        }
    return zy_fail("%s: pre_tokenizer Split.behavior should be one of Removed, Isolated, "
                   "MergedWithPrevious, MergedWithNext, Contiguous",
                   path);
}

int tok_parse_pre_tokenizer(const char *path, const cJSON *j, zy_tokenizer *t) {
    if (is_null(j)) return ZY_OK;
    const char *type;
    ZY_TRY(type_of(path, "pre_tokenizer", j, &type));
    if (!strcmp(type, "Sequence"))
        return each_member(path, "pre_tokenizer", j, "pretokenizers", tok_parse_pre_tokenizer, t);
    tok_pre p = {0};
    int rc = ZY_OK;
    if (!strcmp(type, "ByteLevel")) {
        p.kind = TOKP_BYTELEVEL;
        ZY_TRY(get_flag(path, "pre_tokenizer ByteLevel", j, "add_prefix_space", 1,
                        &p.add_prefix_space));
        ZY_TRY(get_flag(path, "pre_tokenizer ByteLevel", j, "use_regex", 1, &p.use_regex));
        if (p.use_regex) rc = pretok_init(&p.pat.re, NULL);
    } else if (!strcmp(type, "Split")) {
        p.kind = TOKP_SPLIT;
        ZY_TRY(parse_split_behavior(path, j, &p.behavior));
        ZY_TRY(get_flag(path, "pre_tokenizer Split", j, "invert", 0, &p.invert));
        rc = get_pattern(path, "pre_tokenizer Split", j, &p.pat);
    } else if (!strcmp(type, "Metaspace")) {
        p.kind = TOKP_METASPACE;
        ZY_TRY(get_char(path, "pre_tokenizer Metaspace", j, "replacement", p.repl, &p.repl_len));
        ZY_TRY(get_scheme(path, "pre_tokenizer Metaspace", j, &p.scheme));
        ZY_TRY(get_flag(path, "pre_tokenizer Metaspace", j, "split", 1, &p.split));
    } else {
        return zy_fail("%s: pre_tokenizer \"%s\" is not supported (zayac implements ByteLevel, "
                       "Split, Metaspace and Sequence of them)",
                       path, type);
    }
    if (rc != ZY_OK) return ZY_ERR;
    t->pres = zy_realloc(t->pres, (size_t)(t->n_pres + 1) * sizeof *t->pres);
    t->pres[t->n_pres++] = p;
    return ZY_OK;
}

int tok_parse_decoder(const char *path, const cJSON *j, zy_tokenizer *t) {
    if (is_null(j)) return ZY_OK;
    const char *type;
    ZY_TRY(type_of(path, "decoder", j, &type));
    t->has_decoder = 1;
    if (!strcmp(type, "Sequence"))
        return each_member(path, "decoder", j, "decoders", tok_parse_decoder, t);
    tok_dec d = {0};
    if (!strcmp(type, "ByteLevel")) {
        d.kind = TOKD_BYTELEVEL;
    } else if (!strcmp(type, "ByteFallback")) {
        d.kind = TOKD_BYTEFALLBACK;
    } else if (!strcmp(type, "Fuse")) {
        d.kind = TOKD_FUSE;
    } else if (!strcmp(type, "Replace")) {
        const char *content = NULL;
        d.kind = TOKD_REPLACE;
        ZY_TRY(get_string(path, "decoder Replace", j, "content", &content));
        ZY_TRY(get_pattern(path, "decoder Replace", j, &d.pat));
        d.content = zy_strdup(content);
        d.content_len = strlen(content);
    } else if (!strcmp(type, "Strip")) {
        d.kind = TOKD_STRIP;
        ZY_TRY(get_char(path, "decoder Strip", j, "content", d.ch, &d.ch_len));
        ZY_TRY(get_count(path, "decoder Strip", j, "start", &d.start));
        ZY_TRY(get_count(path, "decoder Strip", j, "stop", &d.stop));
    } else if (!strcmp(type, "Metaspace")) {
        d.kind = TOKD_METASPACE;
        ZY_TRY(get_char(path, "decoder Metaspace", j, "replacement", d.ch, &d.ch_len));
        ZY_TRY(get_scheme(path, "decoder Metaspace", j, &d.scheme));
    } else {
        return zy_fail("%s: decoder \"%s\" is not supported (zayac implements ByteLevel, Replace, "
                       "ByteFallback, Fuse, Strip, Metaspace and Sequence of them)",
                       path, type);
    }
    t->decs = zy_realloc(t->decs, (size_t)(t->n_decs + 1) * sizeof *t->decs);
    t->decs[t->n_decs++] = d;
    return ZY_OK;
}

void tok_pipeline_free(zy_tokenizer *t) {
    for (int i = 0; i < t->n_norms; i++) {
        tok_pattern_free(&t->norms[i].pat);
        free(t->norms[i].content);
    }
    for (int i = 0; i < t->n_pres; i++) tok_pattern_free(&t->pres[i].pat);
    for (int i = 0; i < t->n_decs; i++) {
        tok_pattern_free(&t->decs[i].pat);
        free(t->decs[i].content);
    }
    free(t->norms);
    free(t->pres);
    free(t->decs);
    t->norms = NULL, t->pres = NULL, t->decs = NULL;
    t->n_norms = t->n_pres = t->n_decs = 0;
}

static const char *norm_name(const tok_norm *n) {
    return n->kind == TOKN_REPLACE ? "Replace" : "Prepend";
}

static const char *pre_name(const tok_pre *p) {
    return p->kind == TOKP_BYTELEVEL ? "ByteLevel" : p->kind == TOKP_SPLIT ? "Split" : "Metaspace";
}

static const char *dec_name(const tok_dec *d) {
    static const char *const names[] = {"ByteLevel", "Replace", "ByteFallback",
                                        "Fuse",      "Strip",   "Metaspace"};
    return names[d->kind];
}

void tok_describe(const zy_tokenizer *t, char *buf, size_t cap) {
    size_t n = 0;
#define ADD(...)                                                                                   \
    do {                                                                                           \
        int k = snprintf(buf + n, n < cap ? cap - n : 0, __VA_ARGS__);                             \
        if (k > 0) n += (size_t)k;                                                                 \
    } while (0)
    ADD("normalizer ");
    for (int i = 0; i < t->n_norms; i++) ADD("%s%s", i ? ", " : "", norm_name(&t->norms[i]));
    ADD("%s; pre-tokenizer ", t->n_norms ? "" : "none");
    for (int i = 0; i < t->n_pres; i++) ADD("%s%s", i ? ", " : "", pre_name(&t->pres[i]));
    ADD("%s; model BPE%s%s%s; decoder ", t->n_pres ? "" : "none",
        t->byte_fallback ? " byte_fallback" : "", t->ignore_merges ? " ignore_merges" : "",
        t->unk_id >= 0 ? " unk" : "");
    for (int i = 0; i < t->n_decs; i++) ADD("%s%s", i ? ", " : "", dec_name(&t->decs[i]));
    ADD("%s", t->n_decs ? "" : "none");
    if (t->post_processor)
        ADD("; post-processor %s (not applied: zayac adds no tokens around a text)",
            t->post_processor);
#undef ADD
    if (cap) buf[n < cap ? n : cap - 1] = 0;
}
