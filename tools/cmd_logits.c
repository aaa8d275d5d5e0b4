/* zayac logits: runs a checkpoint on token ids (.npy int32 [B,T]) and writes the logits (.npy
 * float32 [B,T,V]); prints the mean next-token cross-entropy over the batch. */
#include "args.h"
#include "base/err.h"
#include "cmds.h"
#include "io/npy.h"
#include "model_cli.h"

#include <stdio.h>
#include <stdlib.h>

int cmd_logits(int argc, char **argv) {
    char model_buf[4096]; /* --model resolved (cli_model_dir) */
    zy_opt opts[] = {
        {"--model", 1, "HF checkpoint folder", NULL},
        {"--tokens", 1, "input ids: .npy int32 [B,T]", NULL},
        {"--out", 1, "output logits: .npy float32 [B,T,V]", NULL},
        CLI_SKIP_BIAS_OPT,
        {"--help", 0, "this help", NULL},
        {NULL, 0, NULL, NULL},
    };
    const char *syn = "--model DIR --tokens IN.npy --out OUT.npy";
    int done = args_cli("logits", syn, opts, argc, argv, NULL, 0, NULL);
    if (done != ARGS_RUN) return done;
    if (!cli_model_dir(opts, model_buf, sizeof model_buf) || !args_get(opts, "--tokens") ||
        !args_get(opts, "--out")) {
        zy_fail("--model, --tokens and --out are required");
        return args_usage_error("logits", syn, opts);
    }
    const char *tok_path = args_get(opts, "--tokens");
    zy_npy tokens;
    if (npy_read_as(&tokens, tok_path, ZY_NPY_I32) != 0) return cli_error("logits");
    if (tokens.ndim != 2 || tokens.shape[0] < 1 || tokens.shape[1] < 1) {
        char shape[128];
        npy_shape_str(&tokens, shape, sizeof shape);
        npy_free(&tokens);
        zy_fail("%s: expected int32 token ids of shape [B, T], found %s", tok_path, shape);
        return cli_error("logits");
    }
    zy_ctx ctx = {.device = ZY_DEV_CPU, .num_threads = 0};
    zy_model m;
    if (cli_load_model(&m, &ctx, cli_model_dir(opts, model_buf, sizeof model_buf), 0, opts) != 0) {
        npy_free(&tokens);
        return cli_error("logits");
    }
    const int B = (int)tokens.shape[0], T = (int)tokens.shape[1], V = m.cfg.vocab_size;
    const int32_t *ids = tokens.data;
    int rc = 0;
    for (size_t i = 0; i < tokens.numel && rc == 0; i++)
        if (ids[i] < 0 || ids[i] >= V)
            rc = zy_fail("%s: token id %d at position %zu is outside the vocabulary [0, %d)",
                         tok_path, ids[i], i, V);
    zy_acts a = {0};
    if (rc == 0) rc = acts_init(&a, &m, B, T, 0);
    if (rc == 0) {
        int32_t *targets = malloc(tokens.numel * sizeof *targets);
        for (int b = 0; b < B; b++)
            for (int t = 0; t < T; t++)
                targets[b * T + t] = t + 1 < T ? ids[b * T + t + 1] : ZY_IGNORE_INDEX;
        double sum = model_forward(&m, &a, ids, targets);
        free(targets);
        int64_t shape[3] = {B, T, V};
        rc = npy_write_f32(args_get(opts, "--out"), 3, shape, a.logits);
        if (rc == 0 && a.count > 0)
            printf("mean next-token cross-entropy: %.6f over %d tokens\n", sum / a.count, a.count);
        else if (rc == 0)
            printf("mean next-token cross-entropy: n/a (T = 1)\n");
        acts_free(&a, &m);
    }
    model_free(&m);
    npy_free(&tokens);
    return rc == 0 ? 0 : cli_error("logits");
}
