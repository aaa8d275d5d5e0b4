/* The trainer's batches on top of the data loader (see batches.h): [B, T+1] windows split into
 * inputs and next-token targets, and the loader position as JSON for state.json. */
#include "train/batches.h"
#include "base/err.h"
#include "data/loader.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

struct zy_batches {
    zy_loader *loader;
    int B, T;
    int32_t *window; /* [B, T+1] */
};

int batches_open(zy_batches **out, const zy_train_config *c, int val, uint64_t seed) {
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
    zy_batches *b = zy_calloc(1, sizeof *b);
    if (loader_open(&b->loader, src, c->n_sources, &o) != ZY_OK) {
        free(b);
        return zy_fail_ctx("opening the %s split", val ? "validation" : "training");
    }
    b->B = c->batch_size;
    b->T = c->seq_len;
    b->window = zy_malloc((size_t)b->B * (b->T + 1) * sizeof *b->window);
    *out = b;
    return ZY_OK;
}

void batches_close(zy_batches *b) {
    if (!b) return;
    loader_free(b->loader);
    free(b->window);
    free(b);
}

int batches_next(zy_batches *b, int32_t *ids, int32_t *targets) {
    loader_next(b->loader, b->window, NULL);
    const int T = b->T;
    for (int r = 0; r < b->B; r++) {
        const int32_t *w = b->window + (size_t)r * (T + 1);
        memcpy(ids + (size_t)r * T, w, (size_t)T * sizeof *ids);
        memcpy(targets + (size_t)r * T, w + 1, (size_t)T * sizeof *targets);
    }
    return ZY_OK;
}

char *batches_state_json(const zy_batches *b) {
    zy_loader_state st;
    loader_get_state(b->loader, &st);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "version", (double)st.version);
    cJSON_AddNumberToObject(o, "seed", (double)st.seed);
    cJSON_AddNumberToObject(o, "step", (double)st.step);
    cJSON *drawn = cJSON_AddArrayToObject(o, "drawn");
    for (uint64_t i = 0; i < st.nsrc; i++)
        cJSON_AddItemToArray(drawn, cJSON_CreateNumber((double)st.drawn[i]));
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return text;
}

static int get_u64(const cJSON *o, const char *key, const char *source, uint64_t *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || v->valuedouble < 0)
        return zy_fail("%s: train_loader.%s is missing or not a count", source, key);
    *out = (uint64_t)v->valuedouble;
    return ZY_OK;
}

int batches_restore(zy_batches *b, const char *json, const char *source) {
    cJSON *o = cJSON_Parse(json);
    if (!o) return zy_fail("%s: train_loader is not valid JSON", source);
    zy_loader_state st;
    memset(&st, 0, sizeof st);
    int rc = get_u64(o, "version", source, &st.version);
    if (rc == ZY_OK) rc = get_u64(o, "seed", source, &st.seed);
    if (rc == ZY_OK) rc = get_u64(o, "step", source, &st.step);
    const cJSON *drawn = cJSON_GetObjectItemCaseSensitive(o, "drawn"), *it;
    if (rc == ZY_OK && (!cJSON_IsArray(drawn) || cJSON_GetArraySize(drawn) > ZY_LOADER_MAX_SOURCES))
        rc = zy_fail("%s: train_loader.drawn must be a list of counts", source);
    cJSON_ArrayForEach(it, drawn) {
        if (rc != ZY_OK) break;
        if (!cJSON_IsNumber(it) || it->valuedouble < 0)
            rc = zy_fail("%s: train_loader.drawn holds a non-count", source);
        else st.drawn[st.nsrc++] = (uint64_t)it->valuedouble;
    }
    cJSON_Delete(o);
    if (rc == ZY_OK && loader_set_state(b->loader, &st) != ZY_OK)
        rc = zy_fail_ctx("%s: restoring the data position", source);
    return rc;
}

int32_t batches_max_token(const zy_batches *b) {
    return (int32_t)loader_vocab_size(b->loader) - 1;
}
