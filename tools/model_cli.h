/* Shared by the model commands: resolving --model (an HF checkpoint folder) or --preset/--config
 * (fresh weights) into a loaded CPU model. */
#ifndef ZY_MODEL_CLI_H
#define ZY_MODEL_CLI_H

#include "args.h"
#include "io/hf_model.h"
#include "model/model.h"

/* The option every command that loads a checkpoint takes (see io/hf_model.h). */
#define CLI_SKIP_BIAS_OPT                                                                          \
    {                                                                                              \
        "--skip-bias", 1,                                                                          \
            "hf (default): skip-class balancing biases read as transformers reads them (-1); "     \
            "file: as stored",                                                                     \
            NULL                                                                                   \
    }

/* Reads a config from an HF folder, a config.json path or a preset name, whichever one is given
 * (none or several: an error). */
int cli_config(zy_config *cfg, const char *model_dir, const char *config_path, const char *preset);
/* Loads an HF checkpoint folder into a model on ctx, by the --skip-bias rule in opts. */
int cli_load_model(zy_model *m, zy_ctx *ctx, const char *dir, int with_grads, const zy_opt *opts);
/* --model's folder: an HF folder as given, or a training checkpoint's (checkpoints/step_N/model);
 * buf holds the latter. NULL without --model. */
const char *cli_model_dir(const zy_opt *opts, char *buf, size_t n);
/* The --skip-bias rule in opts (hf when absent). */
int cli_skip_bias(const zy_opt *opts, zy_skip_bias_rule *rule);

#endif
