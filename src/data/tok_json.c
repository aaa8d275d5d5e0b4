/* Reading and writing Hugging Face tokenizer.json for BPE models (see tokenizer.h): the model,
 * its vocabulary and merges, the added tokens; the normalizer, pre-tokenizer and decoder are read
 * by tok_json_pipeline.c. Anything that would make HF encode differently from zayac (another model
 * type, dropout, subword prefixes, a component zayac lacks) is refused with an error naming the
 * file; the post-processor is not applied because zayac never adds tokens around a text. */
#include "data/tok_internal.h"
#include "base/err.h"
#include "base/fileio.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const cJSON *get(const cJSON *o, const char *key) {
    return cJSON_GetObjectItemCaseSensitive(o, key);
}

/* A boolean field: absent or null gives def; anything but true/false is an error. */
static int get_bool(const char *path, const cJSON *o, const char *where, const char *key, int def,
                    int *out) {
    const cJSON *v = get(o, key);
    if (!v || cJSON_IsNull(v))
        *out = def;
    else if (cJSON_IsBool(v))
        *out = cJSON_IsTrue(v);
    else
        return zy_fail("%s: %s.%s should be true or false", path, where, key);
    return ZY_OK;
}

/* An absent/null field or one of the given values (a string or a number 0). */
static int is_unset(const cJSON *v) {
    return !v || cJSON_IsNull(v) || (cJSON_IsString(v) && v->valuestring[0] == 0) ||
           (cJSON_IsNumber(v) && v->valuedouble == 0) || cJSON_IsFalse(v);
}

static int check_model_options(const char *path, const cJSON *model, zy_tokenizer *t) {
    static const char *const unsupported[] = {"dropout", "continuing_subword_prefix",
                                              "end_of_word_suffix"};
    for (size_t i = 0; i < sizeof unsupported / sizeof *unsupported; i++)
        if (!is_unset(get(model, unsupported[i])))
            return zy_fail("%s: model.%s is set; zayac supports BPE without it", path,
                           unsupported[i]);
    ZY_TRY(get_bool(path, model, "model", "fuse_unk", 0, &t->fuse_unk));
    ZY_TRY(get_bool(path, model, "model", "ignore_merges", 0, &t->ignore_merges));
    ZY_TRY(get_bool(path, model, "model", "byte_fallback", 0, &t->byte_fallback));
    return ZY_OK;
}

static int load_vocab(const char *path, const cJSON *vocab, zy_tokenizer *t) {
    if (!cJSON_IsObject(vocab))
        return zy_fail("%s: model.vocab is missing or not an object of token -> id", path);
    for (const cJSON *it = vocab->child; it; it = it->next) {
        double d = it->valuedouble;
        if (!cJSON_IsNumber(it) || d < 0 || d > 2147483647.0 || floor(d) != d)
            return zy_fail("%s: model.vocab[\"%.40s\"] should be a non-negative integer id", path,
                           it->string);
        ZY_TRY(tok_set_token(t, (int32_t)d, it->string, strlen(it->string), TOKF_MODEL));
    }
    return ZY_OK;
}

static int vocab_id(const zy_tokenizer *t, const char *s, size_t len, int32_t *id) {
    int64_t v;
    if (!strmap_get(&t->vocab, s, len, &v)) return ZY_ERR;
    *id = (int32_t)v;
    return ZY_OK;
}

static int load_merges(const char *path, const cJSON *merges, zy_tokenizer *t) {
    if (!cJSON_IsArray(merges))
        return zy_fail("%s: model.merges is missing or not an array (a BPE tokenizer.json lists "
                       "its merges)",
                       path);
    int r = 0;
    char *buf = NULL;
    size_t cap = 0;
    for (const cJSON *it = merges->child; it; it = it->next, r++) {
        const char *a, *b;
        size_t la, lb;
        if (cJSON_IsString(it)) { /* legacy form: "left right" */
            const char *s = it->valuestring, *sp = strchr(s, ' ');
            if (!sp || strchr(sp + 1, ' ')) {
                free(buf);
                return zy_fail("%s: model.merges[%d] \"%.40s\" is not two tokens separated by "
                               "one space",
                               path, r, s);
            }
            a = s, la = (size_t)(sp - s), b = sp + 1, lb = strlen(sp + 1);
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 && cJSON_IsString(it->child) &&
                   cJSON_IsString(it->child->next)) {
            a = it->child->valuestring, la = strlen(a);
            b = it->child->next->valuestring, lb = strlen(b);
        } else {
            free(buf);
            return zy_fail("%s: model.merges[%d] should be \"a b\" or [\"a\", \"b\"]", path, r);
        }
        if (la + lb + 1 > cap) {
            cap = 2 * (la + lb + 1);
            buf = zy_realloc(buf, cap);
        }
        memcpy(buf, a, la);
        memcpy(buf + la, b, lb);
        int32_t ia, ib, im;
        const char *missing = NULL;
        if (vocab_id(t, a, la, &ia) != ZY_OK)
            missing = "left";
        else if (vocab_id(t, b, lb, &ib) != ZY_OK)
            missing = "right";
        else if (vocab_id(t, buf, la + lb, &im) != ZY_OK)
            missing = "merged";
        if (missing) {
            int rc = zy_fail("%s: model.merges[%d] (\"%.*s\" \"%.*s\"): the %s token is not in "
                             "model.vocab",
                             path, r, (int)la, a, (int)lb, b, missing);
            free(buf);
            return rc;
        }
        tok_push_merge(t, ia, ib, im);
    }
    free(buf);
    return ZY_OK;
}

/* The added tokens. Their ids are given as HF gives them, whatever the file lists: a content
 * already in the vocabulary (or added before) keeps that id, the others take the next ids after
 * the model's vocabulary (its token count), in file order. A listed id that differs is warned
 * about, as HF does. */
static int load_added(const char *path, const cJSON *added, zy_tokenizer *t) {
    if (!added || cJSON_IsNull(added)) return ZY_OK;
    if (!cJSON_IsArray(added)) return zy_fail("%s: added_tokens should be an array", path);
    int64_t next_id = (int64_t)t->vocab.count;
    zy_strmap seen; /* content -> index into t->added */
    strmap_init(&seen);
    int i = 0, rc = ZY_OK;
    for (const cJSON *it = added->child; it && rc == ZY_OK; it = it->next, i++) {
        const cJSON *id = get(it, "id"), *content = get(it, "content");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble > 2147483647.0 ||
            !cJSON_IsString(content)) {
            rc = zy_fail("%s: added_tokens[%d] needs an integer \"id\" and a \"content\"", path, i);
            break;
        }
        zy_added_token a = {0};
        a.content = content->valuestring;
        a.len = strlen(a.content);
        int special, lstrip, rstrip, single_word, normalized;
        if (get_bool(path, it, "added_tokens[]", "special", 0, &special) != ZY_OK ||
            get_bool(path, it, "added_tokens[]", "lstrip", 0, &lstrip) != ZY_OK ||
            get_bool(path, it, "added_tokens[]", "rstrip", 0, &rstrip) != ZY_OK ||
            get_bool(path, it, "added_tokens[]", "single_word", 0, &single_word) != ZY_OK ||
            get_bool(path, it, "added_tokens[]", "normalized", !special, &normalized) != ZY_OK) {
            rc = ZY_ERR;
            break;
        }
        a.special = (uint8_t)special, a.lstrip = (uint8_t)lstrip, a.rstrip = (uint8_t)rstrip;
        a.single_word = (uint8_t)single_word, a.normalized = (uint8_t)normalized;
        if (a.len == 0) continue; /* HF ignores empty added tokens */
        int64_t v;
        if (strmap_get(&seen, a.content, a.len, &v))
            a.id = t->added[v].id;
        else if (strmap_get(&t->vocab, a.content, a.len, &v))
            a.id = (int32_t)v;
        else
            a.id = (int32_t)next_id++;
        if (a.id != (int32_t)id->valuedouble)
            fprintf(stderr,
                    "warning: %s: added token '%.40s' is listed with id %d; HF gives it %d, "
                    "and so does zayac\n",
                    path, a.content, (int)id->valuedouble, a.id);
        rc = tok_set_token(t, a.id, a.content, a.len, TOKF_ADDED | (special ? TOKF_SPECIAL : 0));
        if (rc != ZY_OK) break;
        if (strmap_get(&seen, a.content, a.len, &v)) { /* the same content again: the last wins */
            if (!a.special) t->flags[a.id] &= (uint8_t)~TOKF_SPECIAL;
            free(t->added[v].content);
            t->added[v] = a;
            t->added[v].content = zy_strdup(a.content);
            t->added[v].match = t->added[v].content, t->added[v].match_len = a.len;
            continue;
        }
        *strmap_put(&seen, a.content, a.len, t->n_added, NULL) = t->n_added;
        tok_push_added(t, &a);
    }
    strmap_free(&seen);
    return rc;
}

static int load_root(const char *path, const cJSON *root, zy_tokenizer *t) {
    if (!cJSON_IsObject(root))
        return zy_fail("%s: expected a JSON object (a tokenizer.json), found something else", path);
    const cJSON *model = get(root, "model");
    if (!cJSON_IsObject(model))
        return zy_fail("%s: no \"model\" object; not a Hugging Face tokenizer.json", path);
    const cJSON *type = get(model, "type");
    if (cJSON_IsString(type) && strcmp(type->valuestring, "BPE") != 0)
        return zy_fail("%s: model type is \"%s\"; zayac reads byte-level BPE tokenizers (model "
                       "type \"BPE\")",
                       path, type->valuestring);
    if (!type && !get(model, "merges"))
        return zy_fail("%s: model has no \"type\" and no merges; expected a BPE model", path);
    ZY_TRY(tok_parse_normalizer(path, get(root, "normalizer"), t));
    ZY_TRY(tok_parse_pre_tokenizer(path, get(root, "pre_tokenizer"), t));
    ZY_TRY(tok_parse_decoder(path, get(root, "decoder"), t));
    const cJSON *post = get(root, "post_processor"), *ptype = post ? get(post, "type") : NULL;
    if (cJSON_IsString(ptype)) t->post_processor = zy_strdup(ptype->valuestring);
    ZY_TRY(check_model_options(path, model, t));
    ZY_TRY(load_vocab(path, get(model, "vocab"), t));
    ZY_TRY(load_merges(path, get(model, "merges"), t));
    ZY_TRY(load_added(path, get(root, "added_tokens"), t));
    const cJSON *unk = get(model, "unk_token");
    if (cJSON_IsString(unk)) {
        int64_t v;
        if (strmap_get(&t->vocab, unk->valuestring, strlen(unk->valuestring), &v))
            t->unk_id = (int32_t)v;
        else /* HF fails only when an unknown character needs it: so does zayac */
            t->unk_missing = zy_strdup(unk->valuestring);
    }
    return ZY_OK;
}

int tok_load(zy_tokenizer **out, const char *path) {
    *out = NULL;
    char *buf;
    size_t len;
    ZY_TRY(zy_read_file(path, &buf, &len));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithLengthOpts(buf, len, &end, 0);
    if (!root) {
        size_t at = end && end >= buf ? (size_t)(end - buf) : 0;
        free(buf);
        return zy_fail("%s: not valid JSON (parse error near byte %zu)", path, at);
    }
    zy_tokenizer *t = tok_alloc(path);
    t->source = buf; /* written back as it is by tok_save */
    t->source_len = len;
    int rc = load_root(path, root, t);
    cJSON_Delete(root);
    if (rc == ZY_OK && t->n_ids == 0) rc = zy_fail("%s: the vocabulary is empty", path);
    if (rc == ZY_OK) rc = tok_finalize(t);
    if (rc != ZY_OK) {
        tok_free(t);
        return ZY_ERR;
    }
    *out = t;
    return ZY_OK;
}

/* ---- writing ---- */

static cJSON *byte_level_obj(int add_prefix_space, int trim_offsets, int use_regex) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "type", "ByteLevel");
    cJSON_AddBoolToObject(o, "add_prefix_space", add_prefix_space);
    cJSON_AddBoolToObject(o, "trim_offsets", trim_offsets);
    cJSON_AddBoolToObject(o, "use_regex", use_regex);
    return o;
}

static int cmp_added_id(const void *a, const void *b) {
    const zy_added_token *x = a, *y = b;
    return (x->id > y->id) - (x->id < y->id);
}

/* A trained tokenizer's file: GPT-2's pipeline (tok_use_gpt2_pipeline), as HF writes one. */
static int save_trained(const zy_tokenizer *t, const char *path) {
    int add_prefix_space = t->n_pres ? t->pres[0].add_prefix_space : 0;
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "version", "1.0");
    cJSON_AddNullToObject(root, "truncation");
    cJSON_AddNullToObject(root, "padding");
    cJSON *added = cJSON_AddArrayToObject(root, "added_tokens");
    zy_added_token *sorted = zy_malloc((size_t)(t->n_added ? t->n_added : 1) * sizeof *sorted);
    if (t->n_added) memcpy(sorted, t->added, (size_t)t->n_added * sizeof *sorted);
    qsort(sorted, (size_t)t->n_added, sizeof *sorted, cmp_added_id); /* HF lists them by id */
    for (int i = 0; i < t->n_added; i++) {
        const zy_added_token *a = &sorted[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "id", a->id);
        cJSON_AddStringToObject(o, "content", a->content);
        cJSON_AddBoolToObject(o, "single_word", a->single_word);
        cJSON_AddBoolToObject(o, "lstrip", a->lstrip);
        cJSON_AddBoolToObject(o, "rstrip", a->rstrip);
        cJSON_AddBoolToObject(o, "normalized", a->normalized);
        cJSON_AddBoolToObject(o, "special", a->special);
        cJSON_AddItemToArray(added, o);
    }
    free(sorted);
    cJSON_AddNullToObject(root, "normalizer");
    cJSON_AddItemToObject(root, "pre_tokenizer", byte_level_obj(add_prefix_space, 1, 1));
    /* as HF writes for GPT-2 style: offsets only, no tokens added */
    cJSON_AddItemToObject(root, "post_processor", byte_level_obj(1, 0, 1));
    cJSON_AddItemToObject(root, "decoder", byte_level_obj(1, 1, 1));
    cJSON *model = cJSON_AddObjectToObject(root, "model");
    cJSON_AddStringToObject(model, "type", "BPE");
    cJSON_AddNullToObject(model, "dropout");
    if (t->unk_id >= 0)
        cJSON_AddStringToObject(model, "unk_token", t->text[t->unk_id]);
    else
        cJSON_AddNullToObject(model, "unk_token");
    cJSON_AddNullToObject(model, "continuing_subword_prefix");
    cJSON_AddNullToObject(model, "end_of_word_suffix");
    cJSON_AddBoolToObject(model, "fuse_unk", t->fuse_unk);
    cJSON_AddBoolToObject(model, "byte_fallback", t->byte_fallback);
    cJSON_AddBoolToObject(model, "ignore_merges", t->ignore_merges);
    cJSON *vocab = cJSON_AddObjectToObject(model, "vocab");
    for (int32_t id = 0; id < t->n_ids; id++)
        if (t->flags[id] & TOKF_MODEL) cJSON_AddNumberToObject(vocab, t->text[id], id);
    cJSON *merges = cJSON_AddArrayToObject(model, "merges");
    for (int32_t r = 0; r < t->n_merges; r++) {
        cJSON *pair = cJSON_CreateArray();
        cJSON_AddItemToArray(pair, cJSON_CreateString(t->text[t->merges[r][0]]));
        cJSON_AddItemToArray(pair, cJSON_CreateString(t->text[t->merges[r][1]]));
        cJSON_AddItemToArray(merges, pair);
    }
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    if (!s) return zy_fail("%s: could not format the tokenizer as JSON", path);
    int rc = zy_write_file_atomic(path, s, strlen(s));
    free(s);
    return rc;
}

int tok_save(const zy_tokenizer *t, const char *path) {
    /* a loaded file is written back whole: its post-processor, padding and any field zayac does
     * not read stay as they were */
    if (t->source) return zy_write_file_atomic(path, t->source, t->source_len);
    return save_trained(t, path);
}

int tok_save_hf_config(const zy_tokenizer *t, const char *path, int model_max_length) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "tokenizer_class", "PreTrainedTokenizerFast");
    const char *names[3] = {"bos_token", "eos_token", "pad_token"};
    int32_t ids[3] = {t->bos_id, t->eos_id, t->pad_id};
    for (int i = 0; i < 3; i++)
        if (ids[i] >= 0 && t->text[ids[i]])
            cJSON_AddStringToObject(root, names[i], t->text[ids[i]]);
    /* only for a lone ByteLevel pre-tokenizer: transformers may rebuild others to apply it */
    if (t->n_pres == 1 && t->pres[0].kind == TOKP_BYTELEVEL)
        cJSON_AddBoolToObject(root, "add_prefix_space", t->pres[0].add_prefix_space);
    cJSON_AddBoolToObject(root, "clean_up_tokenization_spaces", 0);
    if (model_max_length > 0) cJSON_AddNumberToObject(root, "model_max_length", model_max_length);
    char *s = cJSON_Print(root);
    cJSON_Delete(root);
    if (!s) return zy_fail("%s: could not format JSON", path);
    int rc = zy_write_file_atomic(path, s, strlen(s));
    free(s);
    return rc;
}
