/* Decoding with the caches (generate.h: a prefill, then one token at a time) against the full
 * forward over the same tokens, on the CPU: every position's logits agree. The caches carry what
 * the full forward reads across positions: the keys and values, the convolutions' last rows and
 * the delayed value projection of the last token (the packed [vcur | vdel] rows), so an offset
 * wrong in any of them shows here. Two configs: every feature of the layer at widths that are
 * multiples of 16, and odd widths (hidden 20, head_dim 6: a value projection of 60 elements, so the
 * packed value matrix is not 16-aligned). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/rng.h"
#include "model/generate.h"
#include "model/model.h"
#include "model_test_util.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *config_odd =
    "{\"model_type\": \"zaya\", \"vocab_size\": 256, \"hidden_size\": 20,"
    " \"num_hidden_layers\": 3, \"num_attention_heads\": 2, \"num_key_value_heads\": 1,"
    " \"head_dim\": 6, \"num_experts\": 4, \"moe_intermediate_size\": 48,"
    " \"router_hidden_size\": 16, \"max_position_embeddings\": 128, \"cca_time0\": 2,"
    " \"cca_time1\": 3, \"sliding_window\": 12, \"partial_rotary_factor\": 1.0,"
    " \"layer_types\": [\"hybrid\", \"hybrid_sliding\", \"hybrid\"],"
    " \"pad_token_id\": 2, \"bos_token_id\": 0, \"eos_token_id\": 1}";

enum { B = 2, T = 14, T0 = 5 }; /* T > sliding_window: the window's cache wraps */

/* Prefill T0 tokens, then feed the rest one at a time; the worst |decode - full| over every
 * logit, relative to the largest full-forward logit. fp32 throughout: the two orders of the same
 * sums differ by a few ulps (the bound below is ~100x that). */
static void check_decode(const char *json) {
    zy_config cfg;
    zy_ctx cpu;
    if (config_parse_json(&cfg, json, "test config") != ZY_OK) fail_msg("%s", zy_errmsg());
    ops_ctx_init_cpu(&cpu, 0);
    zy_model m;
    assert_int_equal(model_init(&m, &cfg, &cpu, 0), ZY_OK);
    model_init_weights(&m, 5);
    mtu_perturb_weights(&m);
    const int V = cfg.vocab_size;
    int32_t ids[B * T];
    zy_rng r = zy_rng_init(7, 1);
    for (int n = 0; n < B * T; n++) ids[n] = 3 + (int32_t)zy_rng_below(&r, (uint64_t)V - 3);
    zy_acts a;
    assert_int_equal(acts_init(&a, &m, B, T, 0), ZY_OK);
    model_forward(&m, &a, ids, NULL);
    const float *full = (const float *)a.logits; /* [B*T, V] */
    double top = 0;
    for (size_t i = 0; i < (size_t)B * T * V; i++) top = fmax(top, fabs(full[i]));

    zy_decoder *dec;
    assert_int_equal(decoder_init(&dec, &m, B, T), ZY_OK);
    float *lg = malloc(sizeof(float) * B * V); /* the last fed position's logits per sequence */
    int32_t chunk[B * T0];
    for (int b = 0; b < B; b++) memcpy(chunk + b * T0, ids + b * T, T0 * sizeof(int32_t));
    assert_int_equal(decoder_feed(dec, chunk, T0, lg), ZY_OK);
    double worst = 0;
    for (int t = T0 - 1; t < T; t++) {
        if (t >= T0) {
            int32_t one[B];
            for (int b = 0; b < B; b++) one[b] = ids[b * T + t];
            assert_int_equal(decoder_feed(dec, one, 1, lg), ZY_OK);
        }
        for (int b = 0; b < B; b++)
            for (int v = 0; v < V; v++)
                worst = fmax(worst, fabs(lg[b * V + v] - full[((size_t)b * T + t) * V + v]));
    }
    printf("  hidden %d, head_dim %d: max |decode - full| = %.3g of logits up to %.3g\n",
           cfg.hidden_size, cfg.head_dim, worst, top);
    assert_true(worst <= 1e-5 * top + 1e-6);
    free(lg);
    decoder_free(dec);
    acts_free(&a, &m);
    model_free(&m);
}

static void test_decode_even(void **state) {
    (void)state;
    check_decode(mtu_config_all_features);
}

static void test_decode_odd_widths(void **state) {
    (void)state;
    check_decode(config_odd);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_decode_even),
        cmocka_unit_test(test_decode_odd_widths),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
