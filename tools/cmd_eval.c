/* zayac eval: validation loss and perplexity of a checkpoint on prepared data. */
#include "args.h"
#include "base/err.h"
#include "cmds.h"
#include "model_cli.h"
#include "train/settings.h"
#include "train/train.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

int cmd_eval(int argc, char **argv) {
    char model_buf[4096]; /* --model resolved (cli_model_dir) */
    zy_opt opts[] = {
        {"--model", 1, "HF checkpoint folder", NULL},
        {"--data", 1, "a prepared data folder (zayac data prepare)", NULL},
        {"--batches", 1, "validation batches (default 16)", NULL},
        {"--batch-size", 1, "sequences per batch (default 8)", NULL},
        {"--seq-len", 1, "tokens per sequence (default 128)", NULL},
        CLI_SKIP_BIAS_OPT,
        {"--help", 0, "this help", NULL},
        {NULL, 0, NULL, NULL},
    };
    const char *syn = "--model DIR --data DIR [--batches N] [--batch-size B] [--seq-len T]";
    int done = args_cli("eval", syn, opts, argc, argv, NULL, 0, NULL);
    if (done != ARGS_RUN) return done;
    if (!cli_model_dir(opts, model_buf, sizeof model_buf) || !args_get(opts, "--data")) {
        zy_fail("--model and --data are required");
        return args_usage_error("eval", syn, opts);
    }
    long long batches, bs, sl;
    zy_skip_bias_rule rule;
    if (args_int_in(opts, "--batches", 16, 1, 1000000, &batches) != 0 ||
        args_int_in(opts, "--batch-size", 8, 1, 65536, &bs) != 0 ||
        args_int_in(opts, "--seq-len", 128, 1, 1 << 24, &sl) != 0 ||
        cli_skip_bias(opts, &rule) != 0)
        return cli_error("eval");
    /* paths travel as JSON string literals, so any character in them is kept exactly */
    char *model_set =
        settings_string_override("model", cli_model_dir(opts, model_buf, sizeof model_buf));
    char *data_set = settings_string_override("data", args_get(opts, "--data"));
    char bs_set[64], sl_set[64];
    snprintf(bs_set, sizeof bs_set, "batch_size=%lld", bs);
    snprintf(sl_set, sizeof sl_set, "seq_len=%lld", sl);
    const char *over[4] = {model_set, data_set, bs_set, sl_set};
    zy_train_config *c = malloc(sizeof *c);
    int rc = train_config_build(c, NULL, over, 4, NULL);
    free(model_set);
    free(data_set);
    double loss = 0;
    int64_t tokens = 0;
    if (rc == 0)
        rc = train_eval(c, cli_model_dir(opts, model_buf, sizeof model_buf), rule, batches, &loss,
                        &tokens);
    free(c);
    if (rc != 0) return cli_error("eval");
    printf("validation loss %.4f | perplexity %.2f | %lld tokens\n", loss, exp(loss),
           (long long)tokens);
    return 0;
}
