/* zayac generate: greedy or sampled continuation of a prompt given as token ids (.npy int32
 * [1,T0]); writes prompt + new tokens (.npy int32 [1,T0+N]). */
#include "args.h"
#include "base/err.h"
#include "base/fileio.h"
#include "cmds.h"
#include "data/tokenizer.h"
#include "io/npy.h"
#include "model/generate.h"
#include "model_cli.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int cmd_generate(int argc, char **argv) {
    char model_buf[4096]; /* --model resolved (cli_model_dir) */
    zy_opt opts[] = {
        {"--model", 1, "HF checkpoint folder", NULL},
        {"--prompt-tokens", 1, "prompt ids: .npy int32 [1,T0]", NULL},
        {"--prompt", 1, "prompt text (the model folder must hold tokenizer.json)", NULL},
        {"--max-new", 1, "tokens to generate (default 32)", NULL},
        {"--greedy", 0, "argmax decoding (default: sampling)", NULL},
        {"--temperature", 1, "sampling temperature (default 1.0)", NULL},
        {"--top-p", 1, "nucleus sampling mass (default 1.0)", NULL},
        {"--seed", 1, "sampling seed (default 0)", NULL},
        {"--ignore-eos", 0,
         "keep going past an eos id (default: any of the config's eos ids ends it)", NULL},
        {"--out", 1, "output ids: .npy int32 [1,T0+N'] (N' <= N: eos ends early)", NULL},
        CLI_SKIP_BIAS_OPT,
        {"--help", 0, "this help", NULL},
        {NULL, 0, NULL, NULL},
    };
    const char *syn = "--model DIR (--prompt-tokens IN.npy --out OUT.npy | --prompt TEXT) "
                      "[--max-new N] [--greedy | --temperature T --top-p P --seed S] "
                      "[--ignore-eos]";
    int done = args_cli("generate", syn, opts, argc, argv, NULL, 0, NULL);
    if (done != ARGS_RUN) return done;
    if (!cli_model_dir(opts, model_buf, sizeof model_buf) ||
        !args_get(opts, "--prompt-tokens") == !args_get(opts, "--prompt") ||
        (args_get(opts, "--prompt-tokens") && !args_get(opts, "--out"))) {
        zy_fail("--model and one of --prompt-tokens (with --out) or --prompt are required");
        return args_usage_error("generate", syn, opts);
    }
    long long max_new, seed;
    double temperature, top_p;
    if (args_int_in(opts, "--max-new", 32, 0, 1000000, &max_new) != 0 ||
        args_int_in(opts, "--seed", 0, 0, LLONG_MAX, &seed) != 0 ||
        args_double_in(opts, "--temperature", 1.0, "(0, inf)", &temperature) != 0 ||
        args_double_in(opts, "--top-p", 1.0, "(0, 1]", &top_p) != 0)
        return cli_error("generate");
    /* the prompt: ids from a .npy file, or text encoded with the checkpoint's tokenizer */
    const char *path = args_get(opts, "--prompt-tokens");
    zy_npy prompt = {0};
    zy_tokenizer *tok = NULL;
    if (path) {
        if (npy_read_as(&prompt, path, ZY_NPY_I32) != 0) return cli_error("generate");
        if (prompt.ndim != 2 || prompt.shape[0] != 1 || prompt.shape[1] < 1) {
            char shape[128];
            npy_shape_str(&prompt, shape, sizeof shape);
            npy_free(&prompt);
            zy_fail("%s: expected int32 prompt ids of shape [1, T0], found %s", path, shape);
            return cli_error("generate");
        }
    } else {
        char tok_path[4096];
        const char *text = args_get(opts, "--prompt");
        zy_ids ids = {0};
        if (zy_path_join(tok_path, sizeof tok_path,
                         cli_model_dir(opts, model_buf, sizeof model_buf), "tokenizer.json") != 0 ||
            tok_load(&tok, tok_path) != 0)
            return cli_error("generate");
        if (tok_encode(tok, text, strlen(text), 0, &ids) != 0 || ids.n == 0) {
            if (ids.n == 0) zy_fail("--prompt: the text encodes to no tokens");
            ids_free(&ids);
            tok_free(tok);
            return cli_error("generate");
        }
        path = "--prompt";
        prompt.ndim = 2;
        prompt.shape[0] = 1;
        prompt.shape[1] = (int64_t)ids.n;
        prompt.numel = ids.n;
        prompt.data = ids.data; /* owned by prompt now (freed by npy_free) */
    }
    zy_ctx ctx = {.device = ZY_DEV_CPU, .num_threads = 0};
    zy_model m;
    if (cli_load_model(&m, &ctx, cli_model_dir(opts, model_buf, sizeof model_buf), 0, opts) != 0) {
        npy_free(&prompt);
        tok_free(tok);
        return cli_error("generate");
    }
    const int T0 = (int)prompt.shape[1], V = m.cfg.vocab_size;
    const int32_t *ids = prompt.data;
    int rc = 0;
    for (int i = 0; i < T0 && rc == 0; i++) /* checked here so the error names the file */
        if (ids[i] < 0 || ids[i] >= V)
            rc = zy_fail("%s: token id %d at position %d is outside the vocabulary [0, %d)", path,
                         ids[i], i, V);
    if (rc == 0 && T0 + max_new > m.cfg.max_position_embeddings)
        rc = zy_fail("--max-new %lld: the prompt's %d tokens plus %lld new ones exceed the model's "
                     "max_position_embeddings %d",
                     max_new, T0, max_new, m.cfg.max_position_embeddings);
    if (rc != 0) {
        model_free(&m);
        npy_free(&prompt);
        tok_free(tok);
        return cli_error("generate");
    }
    zy_sampling s = {.greedy = args_get(opts, "--greedy") != NULL,
                     .temperature = (float)temperature,
                     .top_p = (float)top_p,
                     .seed = (uint64_t)seed};
    int32_t *out = malloc((size_t)(T0 + max_new) * sizeof *out);
    int n = 0;
    const int stop_at_eos = args_get(opts, "--ignore-eos") == NULL;
    rc = model_generate(&m, prompt.data, T0, (int)max_new, &s, stop_at_eos, out, &n);
    if (rc == 0 && args_get(opts, "--out")) {
        int64_t shape[2] = {1, n};
        rc = npy_write_i32(args_get(opts, "--out"), 2, shape, out);
    }
    if (rc == 0 && tok) { /* text in, text out */
        char *text = NULL;
        size_t len = 0;
        rc = tok_decode(tok, out, (size_t)n, 0, &text, &len);
        if (rc == 0) printf("%.*s\n", (int)len, text);
        free(text);
    } else if (rc == 0) {
        for (int i = T0; i < n; i++) printf("%d%c", out[i], i + 1 < n ? ' ' : '\n');
    }
    free(out);
    model_free(&m);
    npy_free(&prompt);
    tok_free(tok);
    return rc == 0 ? 0 : cli_error("generate");
}
