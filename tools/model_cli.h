/* Shared by the model commands: resolving --model (an HF checkpoint folder) or --preset/--config
 * (fresh weights) into a loaded CPU model, and printing errors. */
#ifndef ZY_MODEL_CLI_H
#define ZY_MODEL_CLI_H

#include "model/model.h"

/* Reads a config from an HF folder, a config.json path or a preset name (in that order of which
 * option is given). */
int cli_config(zy_config *cfg, const char *model_dir, const char *config_path, const char *preset);
/* Loads an HF checkpoint folder into a model on ctx. */
int cli_load_model(zy_model *m, zy_ctx *ctx, const char *dir, int with_grads);
/* Prints "zayac CMD: <error>" to stderr and returns exit code 1. */
int cli_error(const char *cmd);

#endif
