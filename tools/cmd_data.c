/* zayac data: prepare token shards from text files; show and check shards. */
#include "args.h"
#include "base/err.h"
#include "cmds.h"
#include "data/prepare.h"
#include "data/shard.h"

#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>

#define MAX_INPUTS 4096

static int cmd_prepare(int argc, char **argv) {
    zy_opt opts[] = {
        {"--tokenizer", 1, "tokenizer.json", NULL},
        {"--input", 1, "text files or folders (more may follow: --input A B C)", NULL},
        {"--out", 1, "output folder (train_*.bin, val_*.bin, meta.json, tokenizer.json)", NULL},
        {"--val-fraction", 1, "share of documents held out for validation (default 0.01)", NULL},
        {"--shard-tokens", 1, "tokens per shard at most (default 100000000)", NULL},
        {"--doc-sep", 1, "blank-line (default) | file | line | fortune", NULL},
        {"--help", 0, "this help", NULL},
        {NULL, 0, NULL, NULL}};
    const char *syn = "--tokenizer T --input FILE... --out DIR [--val-fraction F] "
                      "[--shard-tokens N] [--doc-sep S]";
    const char *pos[MAX_INPUTS], *inputs[MAX_INPUTS + 1];
    int npos = 0;
    int done = args_cli("data prepare", syn, opts, argc, argv, pos, MAX_INPUTS, &npos);
    if (done != ARGS_RUN) return done;
    zy_prepare_opts o = prepare_defaults();
    int n = 0;
    if (args_get(opts, "--input")) inputs[n++] = args_get(opts, "--input");
    for (int i = 0; i < npos; i++) inputs[n++] = pos[i];
    o.inputs = inputs;
    o.n_inputs = n;
    o.tokenizer = args_get(opts, "--tokenizer");
    o.out_dir = args_get(opts, "--out");
    long long shard;
    if (args_double_in(opts, "--val-fraction", 0.01, "[0, 1)", &o.val_fraction) != ZY_OK ||
        args_int_in(opts, "--shard-tokens", 100000000LL, 1, LLONG_MAX, &shard) != ZY_OK)
        return cli_error("data prepare");
    o.shard_tokens = (uint64_t)shard;
    if (args_get(opts, "--doc-sep") && docsep_parse(args_get(opts, "--doc-sep"), &o.doc_sep)) {
        zy_fail_ctx("--doc-sep");
        return cli_error("data prepare");
    }
    if (!o.tokenizer || !o.out_dir || !n) {
        zy_fail("needs --tokenizer, --input and --out");
        return args_usage_error("data prepare", syn, opts);
    }
    zy_prepare_stats st;
    if (data_prepare(&o, &st) != ZY_OK) return cli_error("data prepare");
    printf("%d files, %.2f MB -> %s in %.2f s (%.1f MB/s)\n", st.files, st.bytes / 1e6, o.out_dir,
           st.seconds, st.bytes / 1e6 / st.seconds);
    printf("train: %" PRIu64 " docs, %" PRIu64 " tokens, %d shards\n", st.docs[0], st.tokens[0],
           st.shards[0]);
    printf("val:   %" PRIu64 " docs, %" PRIu64 " tokens, %d shards\n", st.docs[1], st.tokens[1],
           st.shards[1]);
    return 0;
}

static int cmd_check(int argc, char **argv) {
    zy_opt opts[] = {{"--help", 0, "this help", NULL}, {NULL, 0, NULL, NULL}};
    const char *pos[MAX_INPUTS];
    int npos = 0;
    int done = args_cli("data check", "SHARD...", opts, argc, argv, pos, MAX_INPUTS, &npos);
    if (done != ARGS_RUN) return done;
    if (npos == 0) {
        zy_fail("name the shards to check");
        return args_usage_error("data check", "SHARD...", opts);
    }
    int status = ZY_EXIT_OK; /* the first failure's */
    for (int i = 0; i < npos; i++) {
        zy_shard s;
        if (shard_open(&s, pos[i], 1) != ZY_OK) {
            int st = cli_error("data check");
            if (status == ZY_EXIT_OK) status = st;
            continue;
        }
        printf("%s: %" PRIu64 " tokens, %" PRIu64 " docs, vocab %u, eos %u, uint%u, checksum ok\n",
               pos[i], s.h.ntokens, s.h.ndocs, s.h.vocab_size, s.h.eos_id, 8 * s.h.token_bytes);
        shard_close(&s);
    }
    return status;
}

int cmd_data(int argc, char **argv) {
    static const zy_subcmd subs[] = {
        {"prepare", cmd_prepare, "text files -> token shards with a validation split"},
        {"check", cmd_check, "print shard headers and verify their checksums"},
        {NULL, NULL, NULL},
    };
    return args_dispatch("data", subs, argc, argv);
}
