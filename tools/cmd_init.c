/* zayac init: a preset or HF config instantiated with fresh (seeded) weights, written as an HF
 * checkpoint folder. */
#include "args.h"
#include "base/err.h"
#include "base/fileio.h"
#include "cmds.h"
#include "io/hf_checkpoint.h"
#include "model_cli.h"
#include "train/memory.h"

#include <limits.h>
#include <stdio.h>

int cmd_init(int argc, char **argv) {
    zy_opt opts[] = {
        {"--preset", 1, "a preset: tiny, bench-small, bench-base, zaya1-base", NULL},
        {"--config", 1, "an HF config.json file", NULL},
        {"--out", 1, "output folder (created; must not hold a checkpoint already)", NULL},
        {"--seed", 1, "initialisation seed (default 1)", NULL},
        {"--dtype", 1, "fp32 (default) or bf16", NULL},
        {"--help", 0, "this help", NULL},
        {NULL, 0, NULL, NULL},
    };
    const char *syn = "(--preset NAME | --config FILE) --out DIR [--seed S] [--dtype fp32|bf16]";
    int done = args_cli("init", syn, opts, argc, argv, NULL, 0, NULL);
    if (done != ARGS_RUN) return done;
    if (!args_get(opts, "--out")) {
        zy_fail("--out is required");
        return args_usage_error("init", syn, opts);
    }
    /* "f32" is the spelling this option first had; the other commands say fp32 */
    static const char *const dtypes[] = {"fp32", "bf16", "f32", NULL};
    static const zy_st_dtype dtype_of[] = {ZY_ST_F32, ZY_ST_BF16, ZY_ST_F32};
    long long seed;
    int dt;
    if (args_int_in(opts, "--seed", 1, 0, LLONG_MAX, &seed) != 0 ||
        args_choice(opts, "--dtype", dtypes, 0, &dt) != 0)
        return cli_error("init");
    zy_config c;
    if (cli_config(&c, NULL, args_get(opts, "--config"), args_get(opts, "--preset")) != 0)
        return cli_error("init");
    const char *out = args_get(opts, "--out");
    /* Weights in either HF layout mean a checkpoint is there: never write over it. */
    const char *weights[] = {"model.safetensors", "model.safetensors.index.json"};
    for (int i = 0; i < 2; i++) {
        char probe[4096];
        if (zy_path_join(probe, sizeof probe, out, weights[i]) != 0) return cli_error("init");
        if (zy_path_exists(probe)) {
            zy_fail("%s already holds a checkpoint (%s); refusing to overwrite it", out,
                    weights[i]);
            return cli_error("init");
        }
    }
    zy_ctx ctx = {.device = ZY_DEV_CPU, .num_threads = 0};
    char what[4200];
    snprintf(what, sizeof what, "initialising %s",
             args_get(opts, "--config") ? args_get(opts, "--config") : args_get(opts, "--preset"));
    if (mem_check(&ctx, &c, 0, 0, 0, NULL, 1, 1, what, NULL) != 0) return cli_error("init");
    zy_model m;
    if (model_init(&m, &c, &ctx, 0) != 0) return cli_error("init");
    model_init_weights(&m, (uint64_t)seed);
    int rc = zy_mkdirs(out);
    if (rc == 0) rc = hf_save_weights(out, &m.table, m.params, dtype_of[dt]);
    if (rc == 0) rc = config_save(&c, out);
    model_free(&m);
    if (rc != 0) return cli_error("init");
    printf("wrote %s (seed %lld, %s)\n", out, seed, dtypes[dt]);
    return 0;
}
