/* A model loaded for evaluation (see eval_model.h). */
#include "train/eval_model.h"
#include "base/err.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int eval_model_open(zy_eval_model *em, const char *model_dir, zy_skip_bias_rule rule,
                    const char *device) {
    memset(em, 0, sizeof *em);
    const int gpus = ops_cuda_device_count();
    if (!strcmp(device, "cuda") || (!strcmp(device, "auto") && gpus > 0)) {
        if (gpus == 0) return zy_fail("--device cuda: no usable GPU is visible");
        ZY_TRY(ops_ctx_init_cuda(&em->ctx, 0));
    } else if (!strcmp(device, "cpu") || !strcmp(device, "auto")) {
        ops_ctx_init_cpu(&em->ctx, omp_get_max_threads());
    } else {
        return zy_fail("--device must be auto, cpu or cuda, got \"%s\"", device);
    }
    em->have_ctx = 1;
    zy_config cfg;
    ZY_TRY(config_load(&cfg, model_dir));
    ZY_TRY(model_init(&em->model, &cfg, &em->ctx, 0));
    em->have_model = 1;
    return hf_load_model(&em->model, model_dir, rule);
}

int eval_model_shape(zy_eval_model *em, int B, int T) {
    const int max_t = em->model.cfg.max_position_embeddings;
    if (B < 1 || T < 1 || T > max_t)
        return zy_fail("evaluation batch [%d, %d]: the length must be 1 to the model's "
                       "max_position_embeddings (%d)",
                       B, T, max_t);
    if (em->have_acts && em->B == B && em->T == T) {
        eval_model_clear(em);
        return ZY_OK;
    }
    if (em->have_acts) acts_free(&em->acts, &em->model);
    em->have_acts = 0;
    free(em->ids);
    free(em->targets);
    em->B = B;
    em->T = T;
    em->ids = zy_malloc((size_t)B * T * sizeof *em->ids);
    em->targets = zy_malloc((size_t)B * T * sizeof *em->targets);
    eval_model_clear(em);
    ZY_TRY(acts_init(&em->acts, &em->model, B, T, 0));
    em->have_acts = 1;
    return ZY_OK;
}

void eval_model_clear(zy_eval_model *em) {
    const size_t n = (size_t)em->B * em->T;
    for (size_t i = 0; i < n; i++) {
        em->ids[i] = 0; /* padding: a causal model's earlier positions never see it */
        em->targets[i] = ZY_IGNORE_INDEX;
    }
}

double eval_model_nll(zy_eval_model *em, int64_t *count) {
    double sum = model_forward(&em->model, &em->acts, em->ids, em->targets);
    *count = em->acts.count;
    return sum;
}

void eval_model_describe(const zy_eval_model *em, char *buf, size_t n) {
    if (em->ctx.device == ZY_DEV_CUDA)
        snprintf(buf, n, "GPU %d (bf16 activations)", em->ctx.gpu);
    else
        snprintf(buf, n, "CPU, %d threads", em->ctx.num_threads);
}

void eval_model_free(zy_eval_model *em) {
    if (em->have_acts) acts_free(&em->acts, &em->model);
    if (em->have_model) model_free(&em->model);
    if (em->have_ctx) ops_ctx_free(&em->ctx);
    free(em->ids);
    free(em->targets);
    memset(em, 0, sizeof *em);
}
