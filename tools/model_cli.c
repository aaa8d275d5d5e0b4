/* Model loading for the CLI (see model_cli.h). */
#include "model_cli.h"
#include "base/err.h"
#include "base/fileio.h"
#include "train/memory.h"

#include <stdio.h>

int cli_config(zy_config *cfg, const char *model_dir, const char *config_path, const char *preset) {
    if (!!model_dir + !!config_path + !!preset > 1)
        return zy_fail("name one model: --model DIR, --config FILE or --preset NAME, not several");
    if (model_dir) return config_load(cfg, model_dir);
    if (config_path) return config_load(cfg, config_path);
    if (preset) return config_preset(cfg, preset);
    return zy_fail("name a model: --model DIR, --config FILE or --preset NAME");
}

const char *cli_model_dir(const zy_opt *opts, char *buf, size_t n) {
    const char *dir = args_get(opts, "--model");
    if (!dir) return NULL;
    char inner[4096];
    if (zy_path_join(inner, sizeof inner, dir, "model/config.json") == ZY_OK &&
        zy_path_exists(inner) && zy_path_join(buf, n, dir, "model") == ZY_OK)
        return buf; /* a training checkpoint: its HF folder */
    return dir;
}

int cli_skip_bias(const zy_opt *opts, zy_skip_bias_rule *rule) {
    const char *v = args_get(opts, "--skip-bias");
    *rule = ZY_SKIP_BIAS_HF;
    return v ? hf_skip_bias_rule_parse(v, rule) : ZY_OK;
}

int cli_load_model(zy_model *m, zy_ctx *ctx, const char *dir, int with_grads, const zy_opt *opts) {
    zy_skip_bias_rule rule;
    ZY_TRY(cli_skip_bias(opts, &rule));
    zy_config cfg;
    ZY_TRY(config_load(&cfg, dir));
    /* sized before anything is allocated: a model the machine cannot hold is bad input (exit 2),
     * not an allocation failing (or the OOM killer) halfway through loading */
    char what[4200];
    snprintf(what, sizeof what, "loading the model of %s", dir);
    ZY_TRY(mem_check(ctx, &cfg, 0, 0, 0, NULL, 1, 1, what, NULL));
    ZY_TRY(model_init(m, &cfg, ctx, with_grads));
    if (hf_load_model(m, dir, rule) != ZY_OK) {
        model_free(m);
        return ZY_ERR;
    }
    return ZY_OK;
}
