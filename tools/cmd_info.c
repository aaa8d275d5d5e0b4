/* zayac info: a model's config and parameter counts. */
#include "args.h"
#include "base/err.h"
#include "cmds.h"
#include "model_cli.h"

#include <stdio.h>
#include <stdlib.h>

int cmd_info(int argc, char **argv) {
    char model_buf[4096]; /* --model resolved (cli_model_dir) */
    zy_opt opts[] = {
        {"--model", 1, "HF checkpoint folder (config.json + safetensors)", NULL},
        {"--config", 1, "an HF config.json file", NULL},
        {"--preset", 1, "a preset: tiny, bench-small, bench-base, zaya1-base", NULL},
        {"--json", 0, "print the config as HF config.json only", NULL},
        {"--help", 0, "this help", NULL},
        {NULL, 0, NULL, NULL},
    };
    const char *syn = "(--model DIR | --config FILE | --preset NAME) [--json]";
    int done = args_cli("info", syn, opts, argc, argv, NULL, 0, NULL);
    if (done != ARGS_RUN) return done;
    if (!cli_model_dir(opts, model_buf, sizeof model_buf) && !args_get(opts, "--config") &&
        !args_get(opts, "--preset")) {
        zy_fail("name a model: --model DIR, --config FILE or --preset NAME");
        return args_usage_error("info", syn, opts);
    }
    zy_config c;
    if (cli_config(&c, cli_model_dir(opts, model_buf, sizeof model_buf), args_get(opts, "--config"),
                   args_get(opts, "--preset")) != 0)
        return cli_error("info");
    char *json = config_to_json(&c);
    if (args_get(opts, "--json")) {
        printf("%s\n", json);
        free(json);
        return 0;
    }
    printf("config:\n%s\n", json);
    free(json);
    zy_param_counts k = model_count_params(&c);
    printf("parameters:\n");
    printf("  total                      %14lld  (%.3fB)\n", (long long)k.total, k.total / 1e9);
    printf("  embedding (tied head)      %14lld  (%.3fB)\n", (long long)k.embedding,
           k.embedding / 1e9);
    printf("  total without embedding    %14lld  (%.3fB)\n", (long long)(k.total - k.embedding),
           (k.total - k.embedding) / 1e9);
    printf("  active per token, no emb.  %14lld  (%.1fM)\n", (long long)k.active_no_embed,
           k.active_no_embed / 1e6);
    return 0;
}
