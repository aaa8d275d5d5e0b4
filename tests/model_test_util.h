/* Model fixtures shared by the CPU model tests (test_recompute.c, test_decode.c). */
#ifndef ZY_TESTS_MODEL_TEST_UTIL_H
#define ZY_TESTS_MODEL_TEST_UTIL_H

#include "model/model.h"

/* Every feature the layer's forward has: GQA, partial rotary, a sliding-window layer, CCA
 * convolutions of 2 and 3 taps, 4 experts + skip, three layers (a middle one reads and feeds the
 * router's depth averaging). */
extern const char *const mtu_config_all_features;

/* Moves the weights off their initialisation (norms, scales, biases and the balancing biases
 * matter) and refreshes the compute copy. */
void mtu_perturb_weights(zy_model *m);

#endif
