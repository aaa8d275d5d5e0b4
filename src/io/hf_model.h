/* Loading an HF checkpoint folder into a model so that it computes what transformers computes
 * from the same folder.
 *
 * The one place the two differ is the router's skip class. transformers 5.17's
 * ZayaPreTrainedModel._init_weights, which from_pretrained runs on every module after loading,
 * sets `balancing_biases[-1] = -1.0` by plain assignment (not through the guarded init functions
 * that spare loaded tensors), so every layer's skip-class balancing bias becomes -1 whatever the
 * file stores; the other E classes keep the file's values. A checkpoint whose skip bias moved
 * during training therefore routes differently in transformers: tokens the trained model sends to
 * the skip class go to an expert there. zayac's training keeps the skip bias at -1 (balance.h's
 * canonical form), so what it writes loads identically; for any other file the rule below picks
 * whose reading to follow. */
#ifndef ZY_HF_MODEL_H
#define ZY_HF_MODEL_H

#include "model/model.h"

typedef enum {
    ZY_SKIP_BIAS_HF = 0, /* as transformers loads it: each layer's skip bias set to -1 (default) */
    ZY_SKIP_BIAS_FILE,   /* the file's values (the ZAYA1 definition; transformers disagrees) */
} zy_skip_bias_rule;

/* "hf" or "file"; an error names the value. */
int hf_skip_bias_rule_parse(const char *s, zy_skip_bias_rule *out);
/* Loads dir's weights into m (on its device; the bf16 copy refreshed on a GPU) and applies rule
 * to every layer's skip-class bias. Under ZY_SKIP_BIAS_HF a file whose skip biases are not all -1
 * gets one warning on stderr naming the folder, the layers and the first value replaced. */
int hf_load_model(zy_model *m, const char *dir, zy_skip_bias_rule rule);

#endif
