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

/* Runs layer l on a->layers[l].h_in (written beforehand) into h_out; r_prev: the previous layer's
 * router state [N,R] (NULL in layer 0). */
void layer_forward(zy_model *m, zy_acts *a, int l, float *h_out, const zy_act *r_prev,
                   zy_layer_cache *cache);
/* model_forward; when grad_scale != 0 the loss pass also writes dlogits (scaled) over a->logits,
 * the first step of the backward. */
double model_forward_loss(zy_model *m, zy_acts *a, const int32_t *ids, const int32_t *targets,
                          float grad_scale);
/* The final norm and the tied head: logits [N,V] from h_final. */
void head_forward(zy_model *m, zy_acts *a);

#endif
