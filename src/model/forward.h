/* Internal: one ZAYA1 layer forward, shared by training (forward.c) and decoding (generate.c). */
#ifndef ZY_FORWARD_H
#define ZY_FORWARD_H

#include "model/model.h"

/* Decoding state of one layer; NULL in training (sequences start at position 0 with zero padding).
 */
typedef struct {
    zy_act *conv_state; /* [B, P, C] the last P rows of [q0|k0] before this chunk */
    zy_act *vprev;      /* [B, Hk*d/2] the previous token's delayed value projection */
    zy_act *kc, *vc;    /* [B, Tmax, Hk*d] cached keys (after norm + rope) and values */
    int len;            /* tokens already cached */
    int Tmax;
} zy_layer_cache;

/* The norm that reads layer l's output h: the next layer's input norm, or the final norm after the
 * last layer (its normed output y, rstd, weight w and weight gradient gw; gw NULL without
 * gradients). Forward and backward both end a layer with it, fused with the residual scaling. */
typedef struct {
    float *h;
    zy_act *y;
    float *rstd;
    const float *w;
    float *gw;
    int last; /* the final norm: nothing reaches h through a later residual */
} zy_next_norm;
zy_next_norm next_norm(zy_model *m, zy_acts *a, int l);

/* Runs layer l from its normed input x->a (written beforehand, with rstd_a) up to its MoE output
 * x->y; next 1: on into the next layer's h_in, ending with the next norm (the next layer's input
 * norm, or the final norm after the last layer), fused with the residual scaling that produces its
 * input. The backward's recomputation passes next 0: what the next norm writes is kept. */
void layer_forward(zy_model *mo, zy_acts *a, int l, zy_layer_cache *cache, int next);

/* The model from a->ids (and a->pos, written beforehand) to a->logits [N,V]: the embedding, every
 * layer (layer l with caches[l] when caches != NULL) and the tied head. */
void trunk_forward(zy_model *m, zy_acts *a, zy_layer_cache *caches);
#endif
