/* Model fixtures shared by the CPU model tests (model_test_util.h). */
#include "model_test_util.h"

#include "base/rng.h"

const char *const mtu_config_all_features =
    "{\"model_type\": \"zaya\", \"vocab_size\": 256, \"hidden_size\": 64,"
    " \"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
    " \"head_dim\": 16, \"num_experts\": 4, \"moe_intermediate_size\": 48,"
    " \"router_hidden_size\": 16, \"max_position_embeddings\": 128, \"cca_time0\": 2,"
    " \"cca_time1\": 3, \"sliding_window\": 12, \"partial_rotary_factor\": 0.5,"
    " \"layer_types\": [\"hybrid\", \"hybrid_sliding\", \"hybrid\"],"
    " \"pad_token_id\": 2, \"bos_token_id\": 0, \"eos_token_id\": 1}";

void mtu_perturb_weights(zy_model *m) {
    const zy_param_table *t = &m->table;
    for (int i = 0; i < t->count; i++) {
        const zy_param *p = &t->items[i];
        zy_rng r = zy_rng_init(42, (uint64_t)i);
        float *x = m->params + p->offset;
        for (size_t j = 0; j < p->numel; j++) {
            float g = zy_rng_normal(&r);
            if (p->kind == ZY_PARAM_BUFFER)
                x[j] = j + 1 == p->numel ? -0.05f : 0.05f * g;
            else if (p->kind != ZY_PARAM_MATRIX && p->kind != ZY_PARAM_EMBED)
                x[j] += 0.1f * g;
        }
    }
    model_sync_compute_weights(m);
}
