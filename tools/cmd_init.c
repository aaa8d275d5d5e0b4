/* zayac init: a preset or HF config instantiated with fresh (seeded) weights, written as an HF
 * checkpoint folder. */
#include "args.h"
#include "base/err.h"
#include "base/fileio.h"
#include "cmds.h"
#include "io/hf_checkpoint.h"
#include "model_cli.h"

#include <stdio.h>
#include <string.h>

int cmd_init(int argc, char **argv) {
    zy_opt opts[] = {
        {"--preset", 1, "a preset: tiny, bench-small, zaya1-base", NULL},
        {"--config", 1, "an HF config.json file", NULL},
        {"--out", 1, "output folder (created; must not hold a checkpoint already)", NULL},
        {"--seed", 1, "initialisation seed (default 1)", NULL},
        {"--dtype", 1, "f32 (default) or bf16", NULL},
        {"--help", 0, "this help", NULL},
        {NULL, 0, NULL, NULL},
    };
    if (args_parse(argc, argv, opts, NULL, 0, NULL) != 0 || args_get(opts, "--help") ||
        !args_get(opts, "--out")) {
        int help = args_get(opts, "--help") != NULL;
        if (!help) {
            if (!*zy_errmsg()) zy_fail("--out is required");
            cli_error("init");
        }
        args_usage("init",
                   "(--preset NAME | --config FILE) --out DIR [--seed S] [--dtype f32|bf16]", opts);
        return help ? 0 : 2;
    }
    long long seed;
    if (args_int(opts, "--seed", 1, &seed) != 0) return cli_error("init");
    const char *dtype = args_get(opts, "--dtype") ? args_get(opts, "--dtype") : "f32";
    zy_st_dtype dt;
    if (!strcmp(dtype, "f32"))
        dt = ZY_ST_F32;
    else if (!strcmp(dtype, "bf16"))
        dt = ZY_ST_BF16;
    else {
        zy_fail("--dtype must be f32 or bf16, not '%s'", dtype);
        return cli_error("init");
    }
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
    zy_model m;
    if (model_init(&m, &c, &ctx, 0) != 0) return cli_error("init");
    model_init_weights(&m, (uint64_t)seed);
    int rc = zy_mkdirs(out);
    if (rc == 0) rc = hf_save_weights(out, &m.table, m.params, dt);
    if (rc == 0) rc = config_save(&c, out);
    model_free(&m);
    if (rc != 0) return cli_error("init");
    printf("wrote %s (seed %lld, %s)\n", out, seed, dtype);
    return 0;
}
