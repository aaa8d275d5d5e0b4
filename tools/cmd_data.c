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

/* The summary after the shards are written: what was read, what each split holds, and what was
 * left out or skipped (nothing is passed over without a line saying so). */
static void print_summary(const zy_prepare_opts *o, const zy_prepare_stats *st) {
    const zy_docread_stats *rd = &st->read;
    printf("%d files (%d JSONL, %d compressed), %.2f MB of text -> %s in %.2f s (%.1f MB/s)\n",
           rd->files, rd->jsonl_files, rd->compressed_files, rd->bytes / 1e6, o->out_dir,
           st->seconds, rd->bytes / 1e6 / st->seconds);
    for (int s = 0; s < 2; s++)
        printf("%s %" PRIu64 " docs, %" PRIu64 " tokens, %d shards\n",
               s ? "val:  " : "train:", st->docs[s], st->tokens[s], st->shards[s]);
    printf("tokenizer %s: vocabulary hash %016" PRIx64 " (recorded in every shard)\n", o->tokenizer,
           st->tokenizer_hash);
    if (rd->jsonl_files)
        printf("JSONL: %" PRIu64 " records, %" PRIu64 " with an empty \"%s\" (no document)\n",
               rd->jsonl.records, rd->jsonl.empty, o->text_field);
    if (rd->jsonl.bad)
        printf("skipped %" PRIu64 " bad JSONL lines (--skip-bad-lines); the first: %s\n",
               rd->jsonl.bad, rd->jsonl.first_bad);
    char left_out[2048];
    docs_skipped_describe(&st->skipped, left_out, sizeof left_out);
    if (left_out[0]) printf("left out of the input folders: %s\n", left_out);
    for (int s = 0; s < 2; s++)
        if (st->empty_why[s][0])
            fprintf(stderr, "warning: the %s split is empty: %s\n", s ? "validation" : "training",
                    st->empty_why[s]);
}

static int cmd_prepare(int argc, char **argv) {
    zy_opt opts[] = {
        {"--tokenizer", 1, "tokenizer.json", NULL},
        {"--input", 1,
         "files or folders (more may follow: --input A B C); .gz and .zst are read "
         "decompressed",
         NULL},
        {"--out", 1, "output folder (train_*.bin, val_*.bin, meta.json, tokenizer.json)", NULL},
        {"--val-fraction", 1, "share of documents held out for validation (default 0.01)", NULL},
        {"--shard-tokens", 1, "tokens per shard at most (default 100000000)", NULL},
        {"--doc-sep", 1, "text files: blank-line (default) | file | line | fortune", NULL},
        {"--format", 1, "auto (default: *.jsonl, *.ndjson [.gz|.zst] are JSONL) | text | jsonl",
         NULL},
        {"--text-field", 1, "JSONL: the string field holding a document (default text)", NULL},
        {"--skip-bad-lines", 0, "JSONL: count and pass over malformed lines instead of failing",
         NULL},
        {"--force", 0, "replace an existing --out folder (only a zayac data folder)", NULL},
        {"--help", 0, "this help", NULL},
        {NULL, 0, NULL, NULL}};
    const char *syn = "--tokenizer T --input FILE... --out DIR [--val-fraction F] "
                      "[--shard-tokens N] [--doc-sep S] [--format F] [--text-field K] "
                      "[--skip-bad-lines] [--force]";
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
    if (args_get(opts, "--text-field")) o.text_field = args_get(opts, "--text-field");
    o.skip_bad_lines = args_get(opts, "--skip-bad-lines") != NULL;
    o.force = args_get(opts, "--force") != NULL;
    long long shard;
    int format;
    static const char *const formats[] = {"auto", "text", "jsonl", NULL};
    if (args_double_in(opts, "--val-fraction", 0.01, "[0, 1)", &o.val_fraction) != ZY_OK ||
        args_int_in(opts, "--shard-tokens", 100000000LL, 1, LLONG_MAX, &shard) != ZY_OK ||
        args_choice(opts, "--format", formats, DOCFMT_AUTO, &format) != ZY_OK)
        return cli_error("data prepare");
    o.shard_tokens = (uint64_t)shard;
    o.format = (zy_docfmt)format;
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
    print_summary(&o, &st);
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
        if (s.h.vocab_size == 0) /* Megatron: nothing more recorded */
            printf("%s: Megatron dataset, %" PRIu64 " tokens, %" PRIu64 " docs, %u bytes per "
                   "token, index consistent\n",
                   pos[i], s.h.ntokens, s.h.ndocs, s.h.token_bytes);
        else
            printf("%s: %" PRIu64 " tokens, %" PRIu64 " docs, vocab %u, eos %u, uint%u, tokenizer "
                   "hash %016" PRIx64 "%s, checksum ok\n",
                   pos[i], s.h.ntokens, s.h.ndocs, s.h.vocab_size, s.h.eos_id, 8 * s.h.token_bytes,
                   s.h.tokenizer_hash, s.h.tokenizer_hash ? "" : " (not recorded)");
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
