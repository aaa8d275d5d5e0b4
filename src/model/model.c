/* ZAYA1 parameter table, weight views, initialisation, parameter counts and the activation arena
 * (see model.h). */
#include "model/model.h"
#include "base/err.h"
#include "base/rng.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define SHAPE(...) ((const int64_t[]){__VA_ARGS__})
#define NDIM(...)  ((int)(sizeof((int64_t[]){__VA_ARGS__}) / sizeof(int64_t)))
#define ADD(t, kind, layer, name, ...)                                                             \
    params_add(t, name, NDIM(__VA_ARGS__), SHAPE(__VA_ARGS__), kind, layer)

static const char *lname(char *buf, int layer, const char *suffix) {
    snprintf(buf, ZY_PARAM_NAME_MAX, "model.layers.%d.%.70s", layer, suffix);
    return buf;
}

void model_build_table(zy_param_table *t, const zy_config *c) {
    const int64_t D = c->hidden_size, V = c->vocab_size, d = c->head_dim;
    const int64_t Hq = c->num_attention_heads, Hk = c->num_key_value_heads;
    const int64_t C = (Hq + Hk) * d, E1 = c->num_experts + 1, E = c->num_experts;
    const int64_t F = c->moe_intermediate_size, R = c->router_hidden_size;
    char n[ZY_PARAM_NAME_MAX];
    params_init(t);
    ADD(t, ZY_PARAM_EMBED, -1, "model.embed_tokens.weight", V, D);
    ADD(t, ZY_PARAM_VECTOR, -1, "model.input_hidden_states_scale", D);
    ADD(t, ZY_PARAM_VECTOR, -1, "model.input_hidden_states_bias", D);
    for (int l = 0; l < c->num_hidden_layers; l++) {
        ADD(t, ZY_PARAM_MATRIX, l, lname(n, l, "self_attn.qkv_proj.q_proj.weight"), Hq * d, D);
        params_pack_next(t); /* q and k rows form one [C, D] matrix */
        ADD(t, ZY_PARAM_MATRIX, l, lname(n, l, "self_attn.qkv_proj.k_proj.weight"), Hk * d, D);
        ADD(t, ZY_PARAM_MATRIX, l, lname(n, l, "self_attn.qkv_proj.v_proj_current.weight"),
            Hk * d / 2, D);
        params_pack_next(t); /* the two value projections form one [Hk*d, D] matrix */
        ADD(t, ZY_PARAM_MATRIX, l, lname(n, l, "self_attn.qkv_proj.v_proj_delayed.weight"),
            Hk * d / 2, D);
        ADD(t, ZY_PARAM_CONV, l, lname(n, l, "self_attn.qkv_proj.conv_qk_depthwise.weight"), C, 1,
            c->cca_time0);
        ADD(t, ZY_PARAM_VECTOR, l, lname(n, l, "self_attn.qkv_proj.conv_qk_depthwise.bias"), C);
        ADD(t, ZY_PARAM_CONV, l, lname(n, l, "self_attn.qkv_proj.conv_qk_grouped.weight"), C, d,
            c->cca_time1);
        ADD(t, ZY_PARAM_VECTOR, l, lname(n, l, "self_attn.qkv_proj.conv_qk_grouped.bias"), C);
        ADD(t, ZY_PARAM_VECTOR, l, lname(n, l, "self_attn.qk_norm.temp"), Hk);
        ADD(t, ZY_PARAM_MATRIX, l, lname(n, l, "self_attn.o_proj.weight"), D, Hq * d);
        ADD(t, ZY_PARAM_VECTOR, l, lname(n, l, "input_layernorm.weight"), D);
        ADD(t, ZY_PARAM_VECTOR, l, lname(n, l, "post_attention_layernorm.weight"), D);
        static const char *rs[2] = {"post_attention_residual_scale", "post_mlp_residual_scale"};
        static const char *rf[4] = {"hidden_states_bias", "hidden_states_scale", "residual_bias",
                                    "residual_scale"};
        for (int i = 0; i < 2; i++)
            for (int j = 0; j < 4; j++) {
                char suffix[ZY_PARAM_NAME_MAX];
                snprintf(suffix, sizeof suffix, "%s.%s", rs[i], rf[j]);
                ADD(t, ZY_PARAM_VECTOR, l, lname(n, l, suffix), D);
            }
        ADD(t, ZY_PARAM_MATRIX, l, lname(n, l, "mlp.gate.down_proj.weight"), R, D);
        ADD(t, ZY_PARAM_VECTOR, l, lname(n, l, "mlp.gate.down_proj.bias"), R);
        if (l > 0) ADD(t, ZY_PARAM_VECTOR, l, lname(n, l, "mlp.gate.router_states_scale"), R);
        ADD(t, ZY_PARAM_VECTOR, l, lname(n, l, "mlp.gate.router_mlp.norm.weight"), R);
        ADD(t, ZY_PARAM_MATRIX, l, lname(n, l, "mlp.gate.router_mlp.fc1.weight"), R, R);
        ADD(t, ZY_PARAM_VECTOR, l, lname(n, l, "mlp.gate.router_mlp.fc1.bias"), R);
        ADD(t, ZY_PARAM_MATRIX, l, lname(n, l, "mlp.gate.router_mlp.fc2.weight"), R, R);
        ADD(t, ZY_PARAM_VECTOR, l, lname(n, l, "mlp.gate.router_mlp.fc2.bias"), R);
        ADD(t, ZY_PARAM_MATRIX, l, lname(n, l, "mlp.gate.router_mlp.out_proj.weight"), E1, R);
        ADD(t, ZY_PARAM_BUFFER, l, lname(n, l, "mlp.gate.balancing_biases"), E1);
        ADD(t, ZY_PARAM_MATRIX, l, lname(n, l, "mlp.experts.gate_up_proj"), E, 2 * F, D);
        ADD(t, ZY_PARAM_MATRIX, l, lname(n, l, "mlp.experts.down_proj"), E, D, F);
    }
    ADD(t, ZY_PARAM_VECTOR, -1, "model.norm.weight", D);
}

static float *view(const zy_param_table *t, float *base, const char *name) {
    int i = params_find(t, name);
    ZY_CHECKF(i >= 0, "missing tensor %s", name);
    return base + t->items[i].offset;
}

static void build_views(zy_weights *w, const zy_model *m, float *base) {
    const zy_param_table *t = &m->table;
    char n[ZY_PARAM_NAME_MAX];
    w->emb = view(t, base, "model.embed_tokens.weight");
    w->in_scale = view(t, base, "model.input_hidden_states_scale");
    w->in_bias = view(t, base, "model.input_hidden_states_bias");
    w->norm_f = view(t, base, "model.norm.weight");
    w->layers = zy_calloc((size_t)m->cfg.num_hidden_layers, sizeof *w->layers);
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
        zy_layer_w *x = &w->layers[l];
#define V(field, suffix) x->field = view(t, base, lname(n, l, suffix))
        V(wqk, "self_attn.qkv_proj.q_proj.weight");
        V(wvc, "self_attn.qkv_proj.v_proj_current.weight");
        V(wvd, "self_attn.qkv_proj.v_proj_delayed.weight");
        V(conv1_w, "self_attn.qkv_proj.conv_qk_depthwise.weight");
        V(conv1_b, "self_attn.qkv_proj.conv_qk_depthwise.bias");
        V(conv2_w, "self_attn.qkv_proj.conv_qk_grouped.weight");
        V(conv2_b, "self_attn.qkv_proj.conv_qk_grouped.bias");
        V(temp, "self_attn.qk_norm.temp");
        V(wo, "self_attn.o_proj.weight");
        V(ln_in, "input_layernorm.weight");
        V(ln_post, "post_attention_layernorm.weight");
        V(pa_hb, "post_attention_residual_scale.hidden_states_bias");
        V(pa_hs, "post_attention_residual_scale.hidden_states_scale");
        V(pa_rb, "post_attention_residual_scale.residual_bias");
        V(pa_rs, "post_attention_residual_scale.residual_scale");
        V(pm_hb, "post_mlp_residual_scale.hidden_states_bias");
        V(pm_hs, "post_mlp_residual_scale.hidden_states_scale");
        V(pm_rb, "post_mlp_residual_scale.residual_bias");
        V(pm_rs, "post_mlp_residual_scale.residual_scale");
        V(r_down_w, "mlp.gate.down_proj.weight");
        V(r_down_b, "mlp.gate.down_proj.bias");
        x->r_scale = l > 0 ? view(t, base, lname(n, l, "mlp.gate.router_states_scale")) : NULL;
        V(r_norm, "mlp.gate.router_mlp.norm.weight");
        V(r_fc1_w, "mlp.gate.router_mlp.fc1.weight");
        V(r_fc1_b, "mlp.gate.router_mlp.fc1.bias");
        V(r_fc2_w, "mlp.gate.router_mlp.fc2.weight");
        V(r_fc2_b, "mlp.gate.router_mlp.fc2.bias");
        V(r_out, "mlp.gate.router_mlp.out_proj.weight");
        V(bal, "mlp.gate.balancing_biases");
        V(gate_up, "mlp.experts.gate_up_proj");
        V(down, "mlp.experts.down_proj");
#undef V
        const zy_param *kp =
            &t->items[params_find(t, lname(n, l, "self_attn.qkv_proj.k_proj.weight"))];
        ZY_CHECK(base + kp->offset == x->wqk + (size_t)m->cfg.num_attention_heads *
                                                   m->cfg.head_dim * m->cfg.hidden_size);
        ZY_CHECK(x->wvd == x->wvc + (size_t)m->cfg.num_key_value_heads * m->cfg.head_dim / 2 *
                                        m->cfg.hidden_size); /* one [Hk*d, D] value matrix */
    }
}

/* Points the compute views at the same offsets of buf (elements of ctx's activation dtype). */
static void build_compute_views(zy_model *m, void *buf) {
    const zy_ctx *ctx = m->ctx;
#define CV(field) ops_act_at(ctx, buf, (size_t)(field - m->params))
    m->wc.emb = CV(m->w.emb);
    m->wc.layers = zy_calloc((size_t)m->cfg.num_hidden_layers, sizeof *m->wc.layers);
    for (int l = 0; l < m->cfg.num_hidden_layers; l++) {
        const zy_layer_w *w = &m->w.layers[l];
        zy_layer_wc *c = &m->wc.layers[l];
        c->wqk = CV(w->wqk);
        c->wvc = CV(w->wvc); /* with wvd after it: [Hk*d, D] */
        c->wo = CV(w->wo);
        c->r_down_w = CV(w->r_down_w);
        c->r_fc1_w = CV(w->r_fc1_w);
        c->r_fc2_w = CV(w->r_fc2_w);
        c->r_out = CV(w->r_out);
        c->gate_up = CV(w->gate_up);
        c->down = CV(w->down);
    }
#undef CV
}

/* Orders {first, count} pairs by first element. */
static int cmp_range(const void *a, const void *b) {
    size_t x = ((const size_t *)a)[0], y = ((const size_t *)b)[0];
    return x < y ? -1 : x > y;
}

/* The complement, within the gradient buffer, of the gradients backward.c writes whole with one
 * GEMM (ops_matmul_f32 / ops_expert_matmul_wgrad with beta = grad_beta): model_zero_grads clears
 * only these ranges. */
static void build_zero_ranges(zy_model *m) {
    const zy_config *c = &m->cfg;
    const int L = c->num_hidden_layers;
    const size_t D = c->hidden_size, d = c->head_dim, Hq = c->num_attention_heads;
    const size_t Hk = c->num_key_value_heads, R = c->router_hidden_size, E = c->num_experts;
    const size_t F = c->moe_intermediate_size, half = Hk * d / 2;
    size_t(*gemm)[2] = zy_calloc((size_t)L * 9 + 1, sizeof *gemm);
    int n = 0;
#define GEMM_WRITTEN(ptr, count) (gemm[n][0] = (size_t)((ptr)-m->grads), gemm[n++][1] = (count))
    GEMM_WRITTEN(m->g.emb, (size_t)c->vocab_size * D);
    for (int l = 0; l < L; l++) {
        const zy_layer_w *g = &m->g.layers[l];
        GEMM_WRITTEN(g->wqk, (Hq + Hk) * d * D); /* q and k packed: one [C, D] product */
        GEMM_WRITTEN(g->wvc, 2 * half * D); /* the value projections: one [2*half, D] product */
        GEMM_WRITTEN(g->wo, D * Hq * d);
        GEMM_WRITTEN(g->r_down_w, R * D);
        GEMM_WRITTEN(g->r_fc1_w, R * R);
        GEMM_WRITTEN(g->r_fc2_w, R * R);
        GEMM_WRITTEN(g->r_out, (E + 1) * R);
        GEMM_WRITTEN(g->gate_up, E * 2 * F * D);
        GEMM_WRITTEN(g->down, E * D * F);
    }
#undef GEMM_WRITTEN
    qsort(gemm, (size_t)n, sizeof *gemm, cmp_range);
    m->zero_ranges = zy_calloc((size_t)n + 1, sizeof *m->zero_ranges);
    size_t at = 0;
    for (int i = 0; i <= n; i++) {
        size_t end = i < n ? gemm[i][0] : m->table.total;
        ZY_CHECKF(end >= at, "gradient GEMM ranges overlap at element %zu", end);
        if (end > at) {
            m->zero_ranges[m->nzero][0] = at;
            m->zero_ranges[m->nzero++][1] = end - at;
        }
        if (i < n) at = gemm[i][0] + gemm[i][1];
    }
    free(gemm);
}

int model_init(zy_model *m, const zy_config *cfg, zy_ctx *ctx, int with_grads) {
    memset(m, 0, sizeof *m);
    ZY_TRY(config_validate(cfg, "model"));
    m->cfg = *cfg;
    m->ctx = ctx;
    model_build_table(&m->table, cfg);
    m->params = ops_alloc_releasable(ctx, m->table.total * sizeof(float));
    m->params_resident = m->table.total * sizeof(float);
    build_views(&m->w, m, m->params);
    if (ctx->act_dtype != ZY_DTYPE_F32)
        m->cparams = ops_alloc(ctx, m->table.total * ops_act_size(ctx));
    build_compute_views(m, m->cparams ? m->cparams : (void *)m->params);
    if (with_grads) {
        m->grads = ops_alloc(ctx, m->table.total * sizeof(float));
        build_views(&m->g, m, m->grads);
        build_zero_ranges(m);
        m->grad_beta = 0.0f; /* allocated zeroed; overwriting gives the same */
    }
    return ZY_OK;
}

int model_grads_final_at(const zy_model *m, int i) {
    const zy_param *p = &m->table.items[i];
    if (p->layer >= 0 && m->params + p->offset == m->w.layers[p->layer].ln_in) return p->layer - 1;
    return p->layer;
}

int model_entry_group(const zy_model *m, int i) {
    const zy_param_table *t = &m->table;
    if (t->items[i].layer >= 0) return t->items[i].layer;
    for (int k = 0; k < i; k++) /* a global entry after a layer's comes after the layers */
        if (t->items[k].layer >= 0) return m->cfg.num_hidden_layers;
    return -1;
}

void model_free(zy_model *m) {
    if (m->params) ops_free(m->ctx, m->params);
    if (m->grads) ops_free(m->ctx, m->grads);
    if (m->cparams) ops_free(m->ctx, m->cparams);
    free(m->w.layers);
    free(m->g.layers);
    free(m->wc.layers);
    free(m->zero_ranges);
    free(m->kept);
    params_free(&m->table);
    memset(m, 0, sizeof *m);
}

void model_sync_compute_weights(zy_model *m) {
    if (!m->cparams) return;
    if (!m->kept) {
        ops_cast_to_act(m->ctx, m->cparams, m->params, m->table.total);
        return;
    }
    const size_t esize = ops_act_size(m->ctx);
    for (int i = 0; i < m->nkept; i++)
        ops_cast_to_act(m->ctx, (char *)m->cparams + m->kept[i][0] * esize,
                        m->params + m->kept[i][0], m->kept[i][1]);
}

void model_set_weights(zy_model *m, const float *host) {
    const size_t bytes = m->table.total * sizeof(float);
    if (m->ctx->device == ZY_DEV_CPU) {
        if (host != m->params) memcpy(m->params, host, bytes);
        return;
    }
    if (!m->kept) {
        ops_copy(m->ctx, m->params, host, bytes);
        model_sync_compute_weights(m);
        return;
    }
    /* sharded masters: every compute copy, and the kept masters, from one device copy in the
     * gradient buffer (a load comes between steps, when nothing is in it) */
    ZY_CHECKF(m->grads && m->cparams, "sharded fp32 masters without gradients or compute copy");
    ops_copy(m->ctx, m->grads, host, bytes);
    ops_cast_to_act(m->ctx, m->cparams, m->grads, m->table.total);
    for (int i = 0; i < m->nkept; i++)
        ops_copy(m->ctx, m->params + m->kept[i][0], m->grads + m->kept[i][0],
                 m->kept[i][1] * sizeof(float));
}

void model_release_masters(zy_model *m, const unsigned char *keep) {
    if (m->ctx->device == ZY_DEV_CPU) return;
    const zy_param_table *t = &m->table;
    free(m->kept);
    m->kept = zy_calloc((size_t)t->count + 1, sizeof *m->kept);
    m->nkept = 0;
    for (int i = 0; i < t->count; i++) { /* runs of kept entries, in elements */
        if (!keep[i]) continue;
        const size_t off = t->items[i].offset, n = t->items[i].numel;
        if (m->nkept && m->kept[m->nkept - 1][0] + m->kept[m->nkept - 1][1] == off) {
            m->kept[m->nkept - 1][1] += n;
        } else {
            m->kept[m->nkept][0] = off;
            m->kept[m->nkept++][1] = n;
        }
    }
    size_t(*bytes)[2] = zy_calloc((size_t)m->nkept + 1, sizeof *bytes);
    for (int i = 0; i < m->nkept; i++) {
        bytes[i][0] = m->kept[i][0] * sizeof(float);
        bytes[i][1] = m->kept[i][1] * sizeof(float);
    }
    m->params_resident =
        ops_release_except(m->ctx, m->params, t->total * sizeof(float), bytes, m->nkept);
    free(bytes);
}

void model_zero_grads(zy_model *m) {
    model_zero_grads_on(m, m->ctx);
}

void model_zero_grads_on(zy_model *m, zy_ctx *ctx) {
    if (!m->grads) return;
    for (int i = 0; i < m->nzero; i++)
        ops_zero(ctx, m->grads + m->zero_ranges[i][0], m->zero_ranges[i][1] * sizeof(float));
    m->grad_beta = 0.0f;
}

/* The fill value of a tensor that is not drawn from a normal distribution. */
static int const_init(const zy_param *p, float *value) {
    const char *n = p->name;
    size_t len = strlen(n);
#define ENDS(s) (len >= strlen(s) && strcmp(n + len - strlen(s), s) == 0)
    if (ENDS("_scale") || ENDS("norm.weight") || ENDS("layernorm.weight") || ENDS("qk_norm.temp")) {
        *value = 1.0f;
        return 1;
    }
    if (ENDS("bias") || ENDS("balancing_biases")) {
        *value = 0.0f;
        return 1;
    }
#undef ENDS
    return 0;
}

void model_init_weights(zy_model *m, uint64_t seed) {
    const zy_param_table *t = &m->table;
    size_t bytes = t->total * sizeof(float);
    float *host = m->ctx->device == ZY_DEV_CPU ? m->params : zy_malloc(bytes);
    memset(host, 0, bytes);
    float std = (float)m->cfg.initializer_range;
    for (int i = 0; i < t->count; i++) {
        const zy_param *p = &t->items[i];
        float *x = host + p->offset, value;
        if (const_init(p, &value)) {
            for (size_t j = 0; j < p->numel; j++) x[j] = value;
            if (p->kind == ZY_PARAM_BUFFER) x[p->numel - 1] = -1.0f; /* skip class starts at -1 */
            continue;
        }
        /* one stream per tensor (order-independent); element j uses the stream's draws 2j and
         * 2j+1, so chunks of a tensor fill in parallel with the same values as one pass */
        const size_t chunk = (size_t)1 << 20, nchunks = (p->numel + chunk - 1) / chunk;
#pragma omp parallel for schedule(dynamic)
        for (size_t ch = 0; ch < nchunks; ch++) {
            zy_rng r = zy_rng_init(seed, (uint64_t)i);
            r.counter = 2 * ch * chunk;
            size_t end = (ch + 1) * chunk < p->numel ? (ch + 1) * chunk : p->numel;
            for (size_t j = ch * chunk; j < end; j++) x[j] = std * zy_rng_normal(&r);
        }
    }
    if (host != m->params) {
        model_set_weights(m, host);
        free(host);
    }
}

zy_param_counts model_count_params(const zy_config *c) {
    zy_param_table t;
    model_build_table(&t, c);
    zy_param_counts k = {0, 0, 0};
    int64_t per_expert = 3 * (int64_t)c->moe_intermediate_size * c->hidden_size;
    for (int i = 0; i < t.count; i++)
        if (t.items[i].kind != ZY_PARAM_BUFFER) k.total += (int64_t)t.items[i].numel;
    params_free(&t);
    k.embedding = (int64_t)c->vocab_size * c->hidden_size;
    k.active_no_embed =
        k.total - k.embedding - (int64_t)c->num_hidden_layers * (c->num_experts - 1) * per_expert;
    return k;
}

/* Bump allocation inside one arena; with base == NULL it only measures. */
typedef struct {
    char *base;
    size_t used;
} carver;

static void *carve(carver *cv, size_t bytes) {
    size_t at = (cv->used + 255) & ~(size_t)255;
    cv->used = at + bytes;
    return cv->base ? cv->base + at : NULL;
}

/* Which of a layer's buffers plan_layer carves: those each layer keeps under recomputation, the
 * rest (shared then), or all. */
enum { PLAN_KEPT = 1, PLAN_WORK = 2, PLAN_ALL = 3 };

static void plan_layer(zy_layer_acts *x, const zy_model *m, int B, int T, int parts, carver *cv) {
    const zy_config *c = &m->cfg;
    const size_t N = (size_t)B * T, D = c->hidden_size, d = c->head_dim;
    const size_t Hq = c->num_attention_heads, Hk = c->num_key_value_heads, C = (Hq + Hk) * d;
    const size_t E = c->num_experts, E1 = E + 1, F = c->moe_intermediate_size;
    const size_t R = c->router_hidden_size, half = Hk * d / 2;
    const size_t f = sizeof(float), i4 = sizeof(int32_t), s = ops_act_size(m->ctx);
    const size_t Tm = (size_t)T + c->cca_time1 - 1;
    const int kept = parts & PLAN_KEPT, work = parts & PLAN_WORK;
#define KEPT(field, bytes)                                                                         \
    if (kept) x->field = carve(cv, bytes)
#define WORK(field, bytes)                                                                         \
    if (work) x->field = carve(cv, bytes)
    KEPT(h_in, N * D * f);
    KEPT(a, N * D * s);
    KEPT(rstd_a, N * f);
    WORK(qk0, N * C * s);
    WORK(mid, (size_t)B * Tm * C * s);
    WORK(q, N * Hq * d * s);
    WORK(k, N * Hk * d * s);
    WORK(q_in, N * Hq * d * s);
    WORK(k_in, N * Hk * d * s);
    WORK(qn, N * Hq * f);
    WORK(kn, N * Hk * f);
    WORK(vv, N * 2 * half * s);
    WORK(v, N * Hk * d * s);
    WORK(att, N * Hq * d * s);
    WORK(lse, N * Hq * f);
    WORK(o, N * D * s);
    WORK(h_mid, N * D * f);
    WORK(m, N * D * s);
    WORK(rstd_m, N * f);
    KEPT(z, N * R * s);
    WORK(u0, N * R * s);
    WORK(rstd_z, N * f);
    WORK(f1, N * R * s);
    WORK(g1, N * R * s);
    WORK(f2, N * R * s);
    WORK(g2, N * R * s);
    WORK(rlogits, N * E1 * s);
    WORK(probs, N * E1 * f);
    WORK(choice, N * i4);
    WORK(gate, N * f);
    WORK(counts, E * i4);
    WORK(offsets, E1 * i4);
    WORK(perm, N * i4);
    WORK(xs, N * D * s);
    WORK(gu, N * 2 * F * s);
    WORK(act, N * F * s);
    WORK(ys, N * D * s);
    WORK(y, N * D * s);
#undef KEPT
#undef WORK
}

static void plan_acts(zy_acts *a, const zy_model *m, carver *cv) {
    const zy_config *c = &m->cfg;
    const size_t N = (size_t)a->B * a->T, D = c->hidden_size, d = c->head_dim;
    const size_t Hq = c->num_attention_heads, Hk = c->num_key_value_heads, C = (Hq + Hk) * d;
    const size_t E1 = c->num_experts + 1, F = c->moe_intermediate_size;
    const size_t R = c->router_hidden_size, V = c->vocab_size, half = Hk * d / 2;
    const size_t f = sizeof(float), i4 = sizeof(int32_t), s = ops_act_size(m->ctx);
    const int L = c->num_hidden_layers;
    a->ids = carve(cv, N * i4);
    a->targets = carve(cv, N * i4);
    a->pos = carve(cv, N * i4);
    for (int l = 0; l < L; l++)
        plan_layer(&a->layers[l], m, a->B, a->T, a->recompute ? PLAN_KEPT : PLAN_ALL, cv);
    if (a->recompute) { /* one shared set: layer 0's, the other layers' pointers into it */
        plan_layer(&a->layers[0], m, a->B, a->T, PLAN_WORK, cv);
        for (int l = 1; l < L; l++) {
            zy_layer_acts *x = &a->layers[l], kept = *x;
            *x = a->layers[0];
            x->h_in = kept.h_in, x->a = kept.a, x->rstd_a = kept.rstd_a, x->z = kept.z;
        }
    }
    a->h_final = carve(cv, N * D * f);
    a->xf = carve(cv, N * D * s);
    a->rstd_f = carve(cv, N * f);
    a->logits = carve(cv, N * V * s);
    size_t wide = D > C ? D : C;
    a->dh = carve(cv, N * D * f);
    a->dh2 = carve(cv, N * D * f);
    a->dx = carve(cv, N * wide * s);
    a->dm = carve(cv, N * D * s);
    a->dz = carve(cv, N * R * s);
    a->dz_carry = carve(cv, N * R * s);
    a->dr = carve(cv, N * (R > E1 ? R : E1) * s);
    a->dr2 = carve(cv, N * R * s);
    a->dqk = carve(cv, N * C * s);
    a->dq = carve(cv, N * Hq * d * s);
    a->dk = carve(cv, N * Hk * d * s);
    a->dv = carve(cv, N * Hk * d * s);
    a->dvv = carve(cv, N * 2 * half * s);
    a->datt = carve(cv, N * Hq * d * s);
    a->dys = carve(cv, N * D * s);
    a->dgate = carve(cv, N * f);
    a->dgu = carve(cv, N * 2 * F * s);
    a->dact = carve(cv, N * F * s);
    a->dxs = carve(cv, N * D * s);
}

size_t acts_bytes(const zy_config *cfg, zy_ctx *ctx, int B, int T, int recompute) {
    /* each carve is at most rows x widest x 8 bytes, with rows <= B * (T + cca_time1) and fewer
     * than 64 carves per layer and 64 besides: a bound under 2^62 means no size below wraps */
    const double d = cfg->head_dim,
                 heads = (double)cfg->num_attention_heads + cfg->num_key_value_heads;
    const double widths[] = {
        cfg->vocab_size,         cfg->hidden_size,      heads * d, 2.0 * cfg->moe_intermediate_size,
        cfg->router_hidden_size, cfg->num_experts + 1.0};
    double widest = 1;
    for (size_t i = 0; i < sizeof widths / sizeof widths[0]; i++)
        widest = widths[i] > widest ? widths[i] : widest;
    const double rows = (double)B * ((double)T + cfg->cca_time1);
    if (rows * widest * 8.0 * (64.0 * cfg->num_hidden_layers + 64) > 0x1p62) return SIZE_MAX;
    zy_model m;
    memset(&m, 0, sizeof m);
    m.cfg = *cfg;
    m.ctx = ctx;
    zy_acts a;
    memset(&a, 0, sizeof a);
    a.B = B;
    a.T = T;
    a.recompute = recompute != 0;
    a.layers = zy_calloc((size_t)cfg->num_hidden_layers, sizeof *a.layers);
    carver cv = {NULL, 0};
    plan_acts(&a, &m, &cv);
    free(a.layers);
    return cv.used;
}

int acts_init(zy_acts *a, const zy_model *m, int B, int T, int recompute) {
    memset(a, 0, sizeof *a);
    if (B <= 0 || T <= 0) return zy_fail("batch %d x sequence %d: both must be positive", B, T);
    if (T > m->cfg.max_position_embeddings)
        return zy_fail("sequence length %d exceeds max_position_embeddings %d", T,
                       m->cfg.max_position_embeddings);
    a->B = B;
    a->T = T;
    a->recompute = recompute != 0;
    a->layers = zy_calloc((size_t)m->cfg.num_hidden_layers, sizeof *a->layers);
    carver cv = {NULL, 0};
    plan_acts(a, m, &cv);
    a->arena = ops_alloc(m->ctx, cv.used);
    cv = (carver){a->arena, 0};
    plan_acts(a, m, &cv);
    const int L = m->cfg.num_hidden_layers, E1 = m->cfg.num_experts + 1;
    /* page-locked on CUDA: the dispatch's copy into it does not wait (ops_moe_dispatch_async) */
    a->host_offsets = ops_host_alloc(m->ctx, (size_t)L * E1 * sizeof *a->host_offsets);
    memset(a->host_offsets, 0, (size_t)L * E1 * sizeof *a->host_offsets);
    for (int l = 0; l < L; l++) a->layers[l].offsets_host = a->host_offsets + (size_t)l * E1;
    a->loss_host = ops_host_alloc(m->ctx, sizeof *a->loss_host);
    memset(a->loss_host, 0, sizeof *a->loss_host);
    a->loss_mark = ops_mark_new(m->ctx);
    a->routing_mark = ops_mark_new(m->ctx);
    return ZY_OK;
}

void acts_free(zy_acts *a, const zy_model *m) {
    if (a->arena) ops_free(m->ctx, a->arena);
    free(a->layers);
    ops_host_free(m->ctx, a->host_offsets);
    if (a->loss_host) ops_host_free(m->ctx, a->loss_host);
    if (a->loss_mark) ops_mark_free(m->ctx, a->loss_mark);
    if (a->routing_mark) ops_mark_free(m->ctx, a->routing_mark);
    memset(a, 0, sizeof *a);
}

double model_train_flops_per_token(const zy_config *c, int T) {
    zy_param_counts k = model_count_params(c);
    double dense = (double)k.active_no_embed + (double)c->vocab_size * c->hidden_size;
    double attn = (double)c->num_hidden_layers * T * c->num_attention_heads * c->head_dim;
    return 6.0 * dense + 6.0 * attn;
}
