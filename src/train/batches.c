/* The trainer's batches (see batches.h) on top of the data loader (data/loader.h): the config's
 * sources are folders written by `zayac data prepare`, read through their train_*.bin or val_*.bin
 * shards; the position is the loader state written as JSON with every integer as a decimal string
 * (uint64 values do not fit JSON numbers exactly). */
#include "train/batches.h"
#include "base/err.h"
#include "data/loader.h"
#include "data/tok_hash.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct zy_batches {
    zy_loader *l;
    char what[ZY_PATH_MAX + 48]; /* the sources, for messages: "DIR" or "DIR and 2 more" */
    int B, T;
    int row0, rows;       /* this rank's rows of each batch */
    int32_t *buf;         /* [B, T+1] */
    zy_loader_row *where; /* [B] where each row of buf came from */
    uint32_t id_limit;    /* every id read is below it: the shards' vocabulary, or 2^31 */
    const char *paths[ZY_MAX_SOURCES];
    const char *split;
};

int batches_open(zy_batches **out, const zy_train_config *c, int val, uint64_t seed) {
    *out = NULL;
    zy_loader_source src[ZY_MAX_SOURCES];
    for (int i = 0; i < c->n_sources; i++) {
        src[i].path = c->sources[i].path;
        src[i].split = val ? "val" : "train";
        src[i].weight = c->sources[i].weight;
    }
    zy_loader_opts o = loader_defaults();
    o.B = c->batch_size;
    o.T = c->seq_len;
    o.seed = seed;
    zy_loader *l;
    ZY_TRY(loader_open(&l, src, c->n_sources, &o));
    zy_batches *b = zy_calloc(1, sizeof *b);
    b->l = l;
    snprintf(b->what, sizeof b->what, "%s", c->sources[0].path);
    if (c->n_sources > 1)
        snprintf(b->what + strlen(b->what), sizeof b->what - strlen(b->what), " and %d more",
                 c->n_sources - 1);
    b->B = o.B;
    b->T = o.T;
    b->row0 = 0;
    b->rows = o.B;
    b->buf = zy_malloc((size_t)o.B * (size_t)(o.T + 1) * sizeof *b->buf);
    b->where = zy_calloc((size_t)o.B, sizeof *b->where);
    /* shards that record no vocabulary still cannot hold a negative int32 id */
    b->id_limit = loader_vocab_size(l) ? loader_vocab_size(l) : (uint32_t)INT32_MAX + 1;
    for (int i = 0; i < c->n_sources; i++) b->paths[i] = c->sources[i].path;
    b->split = val ? "val" : "train";
    *out = b;
    return ZY_OK;
}

void batches_close(zy_batches *b) {
    if (!b) return;
    loader_free(b->l);
    free(b->buf);
    free(b->where);
    free(b);
}

int batches_set_slice(zy_batches *b, int rank, int world) {
    if (world < 1 || rank < 0 || rank >= world || b->B % world)
        return zy_fail("batch_size %d cannot be split over %d ranks: make it a multiple of %d",
                       b->B, world, world);
    b->rows = b->B / world;
    b->row0 = rank * b->rows;
    return ZY_OK;
}

/* Bad input: an id outside the shards' vocabulary (a corrupt shard; a 4-byte id of 2^31 or more
 * reads as negative). The up-front check compares the largest id with the model's vocabulary;
 * this one catches what that cannot see, before the model reads the row. */
static int check_row(const zy_batches *b, int r, const int32_t *row) {
    for (int j = 0; j <= b->T; j++)
        if ((uint32_t)row[j] >= b->id_limit) {
            const zy_loader_row *w = &b->where[r];
            return zy_fail("%s: %s shard %d holds token id %" PRIu32 " at token %" PRIu64
                           ", outside its vocabulary [0, %" PRIu32 "): the shard is corrupt",
                           b->paths[w->source], b->split, w->shard, (uint32_t)row[j],
                           w->offset + (uint64_t)j, b->id_limit);
        }
    return ZY_OK;
}

int batches_next(zy_batches *b, int32_t *ids, int32_t *targets) {
    loader_next(b->l, b->buf, b->where);
    for (int i = 0; i < b->rows; i++) {
        const int32_t *row = b->buf + (size_t)(b->row0 + i) * (size_t)(b->T + 1);
        ZY_TRY(check_row(b, b->row0 + i, row));
        memcpy(ids + (size_t)i * b->T, row, (size_t)b->T * sizeof *ids);
        memcpy(targets + (size_t)i * b->T, row + 1, (size_t)b->T * sizeof *targets);
    }
    return ZY_OK;
}

static cJSON *u64_str(uint64_t v) {
    char s[32];
    snprintf(s, sizeof s, "%" PRIu64, v);
    return cJSON_CreateString(s);
}

char *batches_state_json(const zy_batches *b) {
    zy_loader_state st;
    loader_get_state(b->l, &st);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddItemToObject(o, "version", u64_str(st.version));
    cJSON_AddItemToObject(o, "seed", u64_str(st.seed));
    cJSON_AddItemToObject(o, "step", u64_str(st.step));
    cJSON *d = cJSON_AddArrayToObject(o, "drawn");
    for (uint64_t i = 0; i < st.nsrc; i++) cJSON_AddItemToArray(d, u64_str(st.drawn[i]));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static int get_u64(const cJSON *v, const char *what, const char *source, uint64_t *out) {
    char *end;
    errno = 0;
    if (!cJSON_IsString(v) || !v->valuestring[0] ||
        (*out = strtoull(v->valuestring, &end, 10), errno || *end))
        return zy_fail("%s: data loader state: \"%s\" should be an integer in a string", source,
                       what);
    return ZY_OK;
}

int batches_restore(zy_batches *b, const char *json, const char *source) {
    cJSON *o = cJSON_Parse(json);
    if (!o) return zy_fail("%s: data loader state is not valid JSON", source);
    zy_loader_state st = {0};
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(o, "drawn");
    int rc =
        get_u64(cJSON_GetObjectItemCaseSensitive(o, "version"), "version", source, &st.version);
    if (rc == ZY_OK)
        rc = get_u64(cJSON_GetObjectItemCaseSensitive(o, "seed"), "seed", source, &st.seed);
    if (rc == ZY_OK)
        rc = get_u64(cJSON_GetObjectItemCaseSensitive(o, "step"), "step", source, &st.step);
    if (rc == ZY_OK && (!cJSON_IsArray(d) || cJSON_GetArraySize(d) > ZY_LOADER_MAX_SOURCES))
        rc = zy_fail("%s: data loader state: \"drawn\" should list one count per source", source);
    if (rc == ZY_OK) {
        st.nsrc = (uint64_t)cJSON_GetArraySize(d);
        int i = 0;
        for (const cJSON *it = d->child; it && rc == ZY_OK; it = it->next, i++)
            rc = get_u64(it, "drawn[]", source, &st.drawn[i]);
    }
    cJSON_Delete(o);
    ZY_TRY(rc);
    if (loader_set_state(b->l, &st) != ZY_OK) return zy_fail_ctx("%s", source);
    return ZY_OK;
}

void batches_position(const zy_batches *b, uint64_t *rows, uint64_t *drawn) {
    zy_loader_state st;
    loader_get_state(b->l, &st);
    *rows = st.step * (uint64_t)b->B;
    for (uint64_t i = 0; i < st.nsrc; i++) drawn[i] = st.drawn[i];
}

int batches_seek(zy_batches *b, uint64_t rows, const uint64_t *drawn) {
    zy_loader_state st;
    loader_get_state(b->l, &st);
    st.step = (rows + (uint64_t)b->B - 1) / (uint64_t)b->B;
    for (uint64_t i = 0; i < st.nsrc; i++) st.drawn[i] = drawn[i];
    return loader_set_state(b->l, &st);
}

int32_t batches_max_token(const zy_batches *b) {
    return loader_max_token(b->l);
}

int batches_check_vocab(const zy_batches *b, const char *split, int vocab_size, const char *model) {
    int32_t top = loader_max_token(b->l);
    if (top >= vocab_size)
        return zy_fail("the %s data (%s) holds token id %d but the model (%s) has vocab_size %d: "
                       "use a model with a vocabulary of at least %d, or prepare the data with "
                       "the model's tokenizer",
                       split, b->what, top, model, vocab_size, top + 1);
    return ZY_OK;
}

int batches_check_tokenizer(const zy_batches *b, const char *tokenizer_path, const char *role) {
    const char *from;
    uint64_t want = loader_tokenizer_hash(b->l, &from), got;
    if (!want) return ZY_OK;
    int32_t nv;
    if (tok_file_hash(tokenizer_path, &got, &nv) != ZY_OK) return zy_fail_ctx("%s", role);
    if (got != want)
        return zy_fail("%s %s (vocabulary hash %016llx, %d ids) is not the tokenizer the data was "
                       "prepared with (%s records hash %016llx, vocabulary %u): use the data "
                       "folder's tokenizer.json, or prepare the data again with this one",
                       role, tokenizer_path, (unsigned long long)got, nv, from,
                       (unsigned long long)want, loader_vocab_size(b->l));
    return ZY_OK;
}
