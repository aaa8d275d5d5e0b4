/* Incremental decoding with the KV cache, the convolution state and the delayed-value state, and
 * token sampling (greedy, temperature, top-p). */
#ifndef ZY_GENERATE_H
#define ZY_GENERATE_H

#include "model/model.h"

#include <stdint.h>

typedef struct zy_decoder zy_decoder;

/* A decoder for B sequences of up to Tmax tokens (prompt included). */
int decoder_init(zy_decoder **dec, zy_model *m, int B, int Tmax);
void decoder_free(zy_decoder *dec);
/* Feeds T new tokens per sequence (ids [B,T] host; T > 1 only as the first call) and writes the
 * logits of each sequence's last position to logits [B,V] (host). */
int decoder_feed(zy_decoder *dec, const int32_t *ids, int T, float *logits);

typedef struct {
    int greedy;        /* 1: argmax */
    float temperature; /* > 0 */
    float top_p;       /* (0, 1]: nucleus sampling */
    uint64_t seed;
} zy_sampling;

/* Picks a token from logits [V] (host); `draw` counts the draws of this sequence (RNG position). */
int32_t sample_token(const float *logits, int V, const zy_sampling *s, uint64_t draw);
/* Generates max_new tokens after a prompt of T0 tokens; out [T0+max_new] gets prompt + new tokens.
 * Stops early at eos when stop_at_eos (then *n_out < T0+max_new). */
int model_generate(zy_model *m, const int32_t *prompt, int T0, int max_new, const zy_sampling *s,
                   int stop_at_eos, int32_t *out, int *n_out);

#endif
