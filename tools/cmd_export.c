/* zayac export: a clean Hugging Face folder from any zayac checkpoint (or HF folder): the weights
 * only (no optimiser or training state), bf16 by default (the balancing biases stay fp32, as HF
 * keeps them), sharded above --shard-size, with config.json, generation_config.json and, when the
 * checkpoint has one, tokenizer.json and tokenizer_config.json. Written into a temporary folder
 * and renamed into place, so OUT is either complete or absent. */
#include "args.h"
#include "base/err.h"
#include "base/fileio.h"
#include "cmds.h"
#include "data/tokenizer.h"
#include "io/hf_checkpoint.h"
#include "model_cli.h"
#include "optim/balance.h"

#include <cjson/cJSON.h>
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

/* "5GB" (10^9, as transformers counts), "500MB", "2GiB", "1048576": bytes; an error names s. */
static int parse_size(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    static const struct {
        const char *unit;
        double mult;
    } units[] = {{"", 1},         {"B", 1},           {"KB", 1e3},
                 {"MB", 1e6},     {"GB", 1e9},        {"TB", 1e12},
                 {"KiB", 1024.0}, {"MiB", 1048576.0}, {"GiB", 1073741824.0}};
    if (end != s && errno == 0 && v > 0)
        for (size_t i = 0; i < sizeof units / sizeof units[0]; i++)
            if (!strcmp(end, units[i].unit) && v * units[i].mult >= 1 && v * units[i].mult < 1e18) {
                *out = (uint64_t)(v * units[i].mult);
                return ZY_OK;
            }
    return zy_fail("--shard-size '%s': expected a positive size such as 5GB, 500MB or 2GiB", s);
}

/* generation_config.json: the ids generation needs and the longest sequence the model takes. */
static int save_generation_config(const zy_config *c, const char *dir) {
    cJSON *g = cJSON_CreateObject();
    if (c->bos_token_id >= 0) cJSON_AddNumberToObject(g, "bos_token_id", c->bos_token_id);
    if (c->eos_is_list) {
        cJSON *ids = cJSON_AddArrayToObject(g, "eos_token_id");
        for (int i = 0; i < c->n_eos; i++)
            cJSON_AddItemToArray(ids, cJSON_CreateNumber(c->eos_token_ids[i]));
    } else if (c->n_eos) {
        cJSON_AddNumberToObject(g, "eos_token_id", c->eos_token_ids[0]);
    }
    if (c->pad_token_id >= 0) cJSON_AddNumberToObject(g, "pad_token_id", c->pad_token_id);
    cJSON_AddNumberToObject(g, "max_length", c->max_position_embeddings);
    char *text = cJSON_Print(g), path[4096];
    cJSON_Delete(g);
    int rc = zy_path_join(path, sizeof path, dir, "generation_config.json");
    if (rc == ZY_OK) rc = zy_write_file_atomic(path, text, strlen(text));
    free(text);
    return rc;
}

/* tokenizer.json (re-written from the parsed tokenizer, so a broken one is an error here) and
 * tokenizer_config.json with model_max_length. Returns 1 in *written when the source had one. */
static int save_tokenizer(const char *src_dir, const zy_config *c, const char *dir, int *written) {
    char src[4096], path[4096];
    *written = 0;
    ZY_TRY(zy_path_join(src, sizeof src, src_dir, "tokenizer.json"));
    if (!zy_path_exists(src)) return ZY_OK;
    zy_tokenizer *tok;
    ZY_TRY(tok_load(&tok, src));
    int rc = tok_vocab_size(tok) > c->vocab_size
                 ? zy_fail("%s has %d ids but the model's vocab_size is %d", src,
                           tok_vocab_size(tok), c->vocab_size)
                 : ZY_OK;
    if (rc == ZY_OK) rc = zy_path_join(path, sizeof path, dir, "tokenizer.json");
    if (rc == ZY_OK) rc = tok_save(tok, path);
    if (rc == ZY_OK) rc = zy_path_join(path, sizeof path, dir, "tokenizer_config.json");
    if (rc == ZY_OK) rc = tok_save_hf_config(tok, path, c->max_position_embeddings);
    tok_free(tok);
    *written = rc == ZY_OK;
    return rc;
}

/* OUT must be absent or an empty folder: an export never mixes with or replaces other files. */
static int check_out(const char *out) {
    struct stat st;
    if (stat(out, &st) != 0) return ZY_OK;
    if (!S_ISDIR(st.st_mode)) return zy_fail("%s exists and is not a folder", out);
    if (rmdir(out) != 0)
        return zy_fail("%s exists and is not empty; export into a new folder", out);
    return ZY_OK;
}

int cmd_export(int argc, char **argv) {
    char model_buf[4096]; /* --model resolved (cli_model_dir) */
    zy_opt opts[] = {
        {"--model", 1, "a zayac checkpoint (or any HF ZAYA folder)", NULL},
        {"--out", 1, "the HF folder to write (must not exist, or be empty)", NULL},
        {"--dtype", 1, "bf16 (default) or fp32 for the weights (balancing biases stay fp32)", NULL},
        {"--shard-size", 1, "largest weight file, e.g. 5GB (default), 500MB, 2GiB", NULL},
        CLI_SKIP_BIAS_OPT,
        {"--help", 0, "this help", NULL},
        {NULL, 0, NULL, NULL},
    };
    const char *syn = "--model CKPT --out DIR [--dtype bf16|fp32] [--shard-size 5GB]";
    int done = args_cli("export", syn, opts, argc, argv, NULL, 0, NULL);
    if (done != ARGS_RUN) return done;
    if (!cli_model_dir(opts, model_buf, sizeof model_buf) || !args_get(opts, "--out")) {
        zy_fail("--model and --out are required");
        return args_usage_error("export", syn, opts);
    }
    const char *model_dir = cli_model_dir(opts, model_buf, sizeof model_buf),
               *out = args_get(opts, "--out");
    static const char *const dtypes[] = {"bf16", "fp32", NULL};
    int dt;
    if (args_choice(opts, "--dtype", dtypes, 0, &dt) != ZY_OK) return cli_error("export");
    const char *dtype_s = dtypes[dt];
    const zy_st_dtype dtype = dt == 0 ? ZY_ST_BF16 : ZY_ST_F32;
    uint64_t shard = 0;
    if (parse_size(args_get(opts, "--shard-size") ? args_get(opts, "--shard-size") : "5GB",
                   &shard) != ZY_OK)
        return cli_error("export");
    zy_skip_bias_rule rule;
    if (cli_skip_bias(opts, &rule) != ZY_OK || check_out(out) != ZY_OK) return cli_error("export");
    zy_ctx ctx = {.device = ZY_DEV_CPU, .num_threads = 0};
    zy_model m;
    if (cli_load_model(&m, &ctx, model_dir, 0, opts) != ZY_OK) return cli_error("export");
    /* Kept as stored, the file's routing is written in the form transformers preserves. */
    if (rule == ZY_SKIP_BIAS_FILE)
        for (int l = 0; l < m.cfg.num_hidden_layers; l++)
            balance_apply(m.w.layers[l].bal, NULL, m.cfg.num_experts + 1);
    zy_config cfg = m.cfg;
    snprintf(cfg.dtype, sizeof cfg.dtype, "%s", dtype == ZY_ST_BF16 ? "bfloat16" : "float32");

    char tmp[4096];
    int rc = (size_t)snprintf(tmp, sizeof tmp, "%s.partial.%d", out, (int)getpid()) < sizeof tmp
                 ? ZY_OK
                 : zy_fail("%s: path too long", out);
    int n_files = 0, has_tok = 0;
    if (rc == ZY_OK) rc = zy_mkdirs(tmp);
    if (rc == ZY_OK) rc = hf_save_weights_sharded(tmp, &m.table, m.params, dtype, shard, &n_files);
    if (rc == ZY_OK) rc = config_save(&cfg, tmp);
    if (rc == ZY_OK) rc = save_generation_config(&cfg, tmp);
    if (rc == ZY_OK) rc = save_tokenizer(model_dir, &cfg, tmp, &has_tok);
    if (rc == ZY_OK) rc = zy_fsync_path(tmp);
    if (rc == ZY_OK && rename(tmp, out) != 0)
        rc = zy_fail_runtime("%s: cannot rename %s into place: %s", out, tmp, strerror(errno));
    model_free(&m);
    if (rc != ZY_OK) {
        zy_remove_tree(tmp); /* nothing half-written is left behind */
        return cli_error("export");
    }
    printf("exported %s -> %s (%s, %d weight file%s%s)\n", model_dir, out, dtype_s, n_files,
           n_files == 1 ? "" : "s", has_tok ? ", tokenizer" : ", no tokenizer in the checkpoint");
    return 0;
}
