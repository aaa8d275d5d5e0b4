/* Decoding (see generate.h): the same layer_forward as training, with per-layer caches. */
#include "model/generate.h"
#include "base/err.h"
#include "base/rng.h"
#include "model/forward.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

struct zy_decoder {
    zy_model *m;
    int B, Tmax, len;
    zy_layer_cache *caches; /* [L] */
    void *cache_mem;
    float *logits32;       /* [B, V] fp32 logits of the last position, on the model's device */
    zy_acts prefill, step; /* activations for the first chunk and for one token */
    int prefill_T;
};

int decoder_init(zy_decoder **out, zy_model *m, int B, int Tmax) {
    const zy_config *c = &m->cfg;
    if (Tmax > c->max_position_embeddings)
        return zy_fail("%d tokens exceed max_position_embeddings %d", Tmax,
                       c->max_position_embeddings);
    zy_decoder *dec = zy_calloc(1, sizeof *dec);
    dec->m = m;
    dec->B = B;
    dec->Tmax = Tmax;
    const int L = c->num_hidden_layers, d = c->head_dim, Hk = c->num_key_value_heads;
    const size_t C = (size_t)(c->num_attention_heads + Hk) * d;
    const size_t P = (size_t)(c->cca_time0 - 1 + c->cca_time1 - 1), half = (size_t)Hk * d / 2;
    const size_t kv = (size_t)B * Tmax * Hk * d;
    const size_t per_layer = (size_t)B * P * C + (size_t)B * half + 2 * kv;
    zy_ctx *ctx = m->ctx;
    dec->cache_mem = ops_alloc(ctx, (size_t)L * per_layer * ops_act_size(ctx)); /* zeroed */
    dec->logits32 = ops_alloc(ctx, (size_t)B * c->vocab_size * sizeof(float));
    dec->caches = zy_calloc((size_t)L, sizeof *dec->caches);
    for (int l = 0; l < L; l++) {
        zy_act *base = ops_act_at(ctx, dec->cache_mem, (size_t)l * per_layer);
        zy_layer_cache *cc = &dec->caches[l];
        cc->conv_state = base;
        cc->vprev = ops_act_at(ctx, base, (size_t)B * P * C);
        cc->kc = ops_act_at(ctx, cc->vprev, (size_t)B * half);
        cc->vc = ops_act_at(ctx, cc->kc, kv);
        cc->Tmax = Tmax;
    }
    if (acts_init(&dec->step, m, B, 1, 0) != ZY_OK) {
        decoder_free(dec);
        return ZY_ERR;
    }
    *out = dec;
    return ZY_OK;
}

void decoder_free(zy_decoder *dec) {
    if (!dec) return;
    if (dec->cache_mem) ops_free(dec->m->ctx, dec->cache_mem);
    if (dec->logits32) ops_free(dec->m->ctx, dec->logits32);
    free(dec->caches);
    if (dec->prefill.arena) acts_free(&dec->prefill, dec->m);
    if (dec->step.arena) acts_free(&dec->step, dec->m);
    free(dec);
}

int decoder_feed(zy_decoder *dec, const int32_t *ids, int T, float *logits) {
    zy_model *m = dec->m;
    const zy_config *c = &m->cfg;
    if (dec->len + T > dec->Tmax)
        return zy_fail("decoder holds %d tokens; %d more do not fit", dec->Tmax, T);
    if (T > 1 && dec->len > 0) return zy_fail("only the first chunk may hold several tokens");
    zy_acts *a = &dec->step;
    if (T > 1) {
        if (dec->prefill.arena && dec->prefill_T != T) acts_free(&dec->prefill, m);
        if (!dec->prefill.arena) {
            ZY_TRY(acts_init(&dec->prefill, m, dec->B, T, 0));
            dec->prefill_T = T;
        }
        a = &dec->prefill;
    }
    const int B = dec->B, N = B * T, V = c->vocab_size;
    int32_t *pos = zy_malloc((size_t)N * sizeof *pos);
    for (int n = 0; n < N; n++) {
        pos[n] = dec->len + n % T;
        if (ids[n] < 0 || ids[n] >= V) {
            free(pos);
            return zy_fail("token id %d outside the vocabulary [0, %d)", ids[n], V);
        }
    }
    ops_copy(m->ctx, a->pos, pos, (size_t)N * sizeof *pos);
    ops_copy(m->ctx, a->ids, ids, (size_t)N * sizeof *ids);
    free(pos);
    for (int l = 0; l < c->num_hidden_layers; l++) dec->caches[l].len = dec->len;
    trunk_forward(m, a, dec->caches);
    for (int b = 0; b < B; b++)
        ops_act_to_f32(m->ctx, dec->logits32 + (size_t)b * V,
                       ops_act_at(m->ctx, a->logits, ((size_t)b * T + T - 1) * V), (size_t)V);
    ops_copy(m->ctx, logits, dec->logits32, (size_t)B * V * sizeof(float));
    dec->len += T;
    return ZY_OK;
}

typedef struct {
    float p;
    int32_t id;
} prob_id;

static int by_prob_desc(const void *x, const void *y) {
    const prob_id *a = x, *b = y;
    if (a->p != b->p) return a->p < b->p ? 1 : -1;
    return a->id - b->id;
}

int32_t sample_token(const float *logits, int V, const zy_sampling *s, uint64_t draw) {
    int32_t best = 0;
    for (int i = 1; i < V; i++)
        if (logits[i] > logits[best]) best = i; /* first maximum, like torch.argmax */
    if (s->greedy) return best;
    prob_id *p = zy_malloc((size_t)V * sizeof *p);
    double sum = 0;
    for (int i = 0; i < V; i++) {
        p[i].p = (float)exp((double)(logits[i] - logits[best]) / s->temperature);
        p[i].id = i;
        sum += p[i].p;
    }
    qsort(p, (size_t)V, sizeof *p, by_prob_desc);
    /* keep the smallest prefix whose mass reaches top_p */
    double keep = 0;
    int n = 0;
    while (n < V && (n == 0 || keep < s->top_p * sum)) keep += p[n++].p;
    zy_rng r = zy_rng_init(s->seed, 0x5a417e);
    r.counter = draw;
    double u = zy_rng_uniform_f64(&r) * keep, acc = 0;
    int32_t tok = p[n - 1].id;
    for (int i = 0; i < n; i++) {
        acc += p[i].p;
        if (u < acc) {
            tok = p[i].id;
            break;
        }
    }
    free(p);
    return tok;
}

int model_generate(zy_model *m, const int32_t *prompt, int T0, int max_new, const zy_sampling *s,
                   int stop_at_eos, int32_t *out, int *n_out) {
    if (T0 < 1) return zy_fail("the prompt needs at least one token");
    zy_decoder *dec;
    ZY_TRY(decoder_init(&dec, m, 1, T0 + max_new));
    const int V = m->cfg.vocab_size;
    float *logits = zy_malloc((size_t)V * sizeof *logits);
    memcpy(out, prompt, (size_t)T0 * sizeof *out);
    int n = T0, rc = decoder_feed(dec, prompt, T0, logits);
    for (int i = 0; rc == ZY_OK && i < max_new; i++) {
        int32_t tok = sample_token(logits, V, s, (uint64_t)i);
        out[n++] = tok;
        if (stop_at_eos && config_is_eos(&m->cfg, tok)) break;
        if (i + 1 < max_new) rc = decoder_feed(dec, &tok, 1, logits);
    }
    free(logits);
    decoder_free(dec);
    if (n_out) *n_out = n;
    return rc;
}
