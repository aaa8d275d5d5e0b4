/* HF checkpoint folders into a model, as transformers loads them (see hf_model.h). */
#include "io/hf_model.h"
#include "base/err.h"
#include "io/hf_checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int hf_skip_bias_rule_parse(const char *s, zy_skip_bias_rule *out) {
    if (!strcmp(s, "hf"))
        *out = ZY_SKIP_BIAS_HF;
    else if (!strcmp(s, "file"))
        *out = ZY_SKIP_BIAS_FILE;
    else
        return zy_fail("--skip-bias must be hf or file, not '%s'", s);
    return ZY_OK;
}

/* Sets every layer's skip-class bias in host (weights laid out as m->params) to ZY_SKIP_BIAS;
 * warns once if any differed. */
static void skip_bias_as_hf(const zy_model *m, float *host, const char *dir) {
    const int L = m->cfg.num_hidden_layers, E1 = m->cfg.num_experts + 1;
    int changed = 0, first = -1, last = -1;
    float first_value = 0;
    for (int l = 0; l < L; l++) {
        float *skip =
            host + (m->w.layers[l].bal - m->params) + E1 - 1; /* offset works on any device */
        if (*skip == ZY_SKIP_BIAS) continue;
        if (first < 0) {
            first = l;
            first_value = *skip;
        }
        last = l;
        changed++;
        *skip = ZY_SKIP_BIAS;
    }
    if (changed)
        fprintf(stderr,
                "warning: %s: %d of %d layers (%d..%d) store a skip-class balancing bias other "
                "than -1 (layer %d: %g); using -1, as transformers does when it loads this folder "
                "(--skip-bias file keeps the file's values)\n",
                dir, changed, L, first, last, first, first_value);
}

int hf_load_model(zy_model *m, const char *dir, zy_skip_bias_rule rule) {
    /* hf_load_weights leaves its buffer as it was on error, so the CPU loads in place; a GPU model
     * goes through one host copy */
    const size_t bytes = m->table.total * sizeof(float);
    const int on_cpu = m->ctx->device == ZY_DEV_CPU;
    float *host = on_cpu ? m->params : zy_malloc(bytes);
    int rc = hf_load_weights(dir, &m->table, host);
    if (rc == ZY_OK && rule == ZY_SKIP_BIAS_HF) skip_bias_as_hf(m, host, dir);
    if (rc == ZY_OK && !on_cpu) model_set_weights(m, host);
    if (!on_cpu) free(host);
    return rc;
}
