/* zayac tokenizer: train a byte-level BPE tokenizer, encode and decode with any BPE tokenizer.json
 * zayac reads, show one. */
#include "args.h"
#include "base/err.h"
#include "base/fileio.h"
#include "base/timer.h"
#include "cmds.h"
#include "data/tokenizer.h"

#include <errno.h>
#include <limits.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INPUTS   4096
#define MAX_SPECIALS 64

/* Collects "--input A B C": the option's value and the positional arguments after it. */
static int gather_inputs(const zy_opt *opts, const char **pos, int npos, const char **inputs) {
    int n = 0;
    const char *first = args_get(opts, "--input");
    if (first) inputs[n++] = first;
    for (int i = 0; i < npos; i++) inputs[n++] = pos[i];
    return n;
}

/* Takes every "--special X" out of argv (the option may repeat). */
static int take_specials(int *argc, char **argv, const char **out) {
    int n = 0, k = 0;
    for (int i = 0; i < *argc; i++) {
        if (strcmp(argv[i], "--special") == 0 && i + 1 < *argc && n < MAX_SPECIALS) {
            out[n++] = argv[++i];
            continue;
        }
        if (strncmp(argv[i], "--special=", 10) == 0 && n < MAX_SPECIALS) {
            out[n++] = argv[i] + 10;
            continue;
        }
        argv[k++] = argv[i];
    }
    *argc = k;
    return n;
}

static int cmd_train_tok(int argc, char **argv) {
    const char *specials[MAX_SPECIALS];
    int nsp = take_specials(&argc, argv, specials);
    zy_opt opts[] = {
        {"--input", 1, "text files or directories (more may follow: --input A B C)", NULL},
        {"--vocab-size", 1, "ids in all: specials + 256 bytes + merges (default 4096)", NULL},
        {"--out", 1, "tokenizer.json to write", NULL},
        {"--special", 1, "a special token (repeatable; default <|bos|> <|eos|> <|pad|>)", NULL},
        {"--doc-sep", 1, "blank-line|file|line|fortune: separator lines are not trained on", NULL},
        {"--min-frequency", 1, "stop when the best pair occurs fewer times (default 2)", NULL},
        {"--force", 0, "replace an existing --out file", NULL},
        {"--help", 0, "this help", NULL},
        {NULL, 0, NULL, NULL}};
    const char *syn = "--input FILE... --vocab-size N --out tokenizer.json [--force]";
    const char *pos[MAX_INPUTS], *inputs[MAX_INPUTS + 1];
    int npos = 0;
    int done = args_cli("tokenizer train", syn, opts, argc, argv, pos, MAX_INPUTS, &npos);
    if (done != ARGS_RUN) return done;
    int n = gather_inputs(opts, pos, npos, inputs);
    const char *outp = args_get(opts, "--out");
    long long vocab, minf;
    zy_docsep sep = DOCSEP_FILE;
    if (args_int_in(opts, "--vocab-size", 4096, 1, 1 << 30, &vocab) != ZY_OK ||
        args_int_in(opts, "--min-frequency", 2, 1, INT_MAX, &minf) != ZY_OK)
        return cli_error("tokenizer train");
    if (args_get(opts, "--doc-sep") && docsep_parse(args_get(opts, "--doc-sep"), &sep) != ZY_OK) {
        zy_fail_ctx("--doc-sep");
        return cli_error("tokenizer train");
    }
    if (!n || !outp) {
        zy_fail("needs --input and --out");
        return args_usage_error("tokenizer train", syn, opts);
    }
    if (zy_path_exists(outp) && !args_get(opts, "--force")) {
        zy_fail("%s: exists; --force replaces it", outp);
        return cli_error("tokenizer train");
    }
    char **files, left_out[2048];
    int nfiles;
    zy_skipped skipped = {0};
    if (docs_expand_inputs(inputs, n, &files, &nfiles, &skipped) != ZY_OK)
        return cli_error("tokenizer train");
    docs_skipped_describe(&skipped, left_out, sizeof left_out);
    if (left_out[0]) printf("left out of the input folders: %s\n", left_out);
    double t0 = zy_now();
    zy_tokenizer *t;
    size_t bytes = 0;
    int rc = tok_train_files((const char *const *)files, nfiles, sep, (int32_t)vocab,
                             nsp ? specials : NULL, nsp, (int)minf, &t, &bytes);
    docs_free_paths(files, nfiles);
    if (rc != ZY_OK) return cli_error("tokenizer train");
    double dt = zy_now() - t0;
    if (tok_save(t, outp) != ZY_OK) {
        tok_free(t);
        return cli_error("tokenizer train");
    }
    printf("trained %d ids (%d merges) on %d files, %.2f MB, in %.2f s -> %s\n", tok_vocab_size(t),
           tok_n_merges(t), nfiles, bytes / 1e6, dt, outp);
    if (tok_vocab_size(t) < vocab)
        printf("note: stopped early, no pair occurs %lld times or more\n", minf);
    tok_free(t);
    return 0;
}

static int print_piece(const char *piece, size_t len, void *ctx) {
    (void)ctx;
    fwrite(piece, 1, len, stdout);
    putchar('\n');
    return 0;
}

static int cmd_encode(int argc, char **argv) {
    zy_opt opts[] = {
        {"--tokenizer", 1, "tokenizer.json", NULL},
        {"--text", 1, "text to encode", NULL},
        {"--input", 1, "file whose bytes to encode", NULL},
        {"--special-tokens", 0, "match added tokens in the text (as HF encode)", NULL},
        {"--bench", 0, "print throughput instead of ids", NULL},
        {"--pieces", 0, "print the pieces the pre-tokenizers make (before BPE), one a line", NULL},
        {"--help", 0, "this help", NULL},
        {NULL, 0, NULL, NULL}};
    const char *syn = "--tokenizer T (--text S | --input F) [--special-tokens] [--bench|--pieces]";
    int done = args_cli("tokenizer encode", syn, opts, argc, argv, NULL, 0, NULL);
    if (done != ARGS_RUN) return done;
    const char *tp = args_get(opts, "--tokenizer"), *text = args_get(opts, "--text"),
               *in = args_get(opts, "--input");
    if (!tp || (!text == !in)) {
        zy_fail("needs --tokenizer and one of --text or --input");
        return args_usage_error("tokenizer encode", syn, opts);
    }
    zy_tokenizer *t;
    if (tok_load(&t, tp) != ZY_OK) return cli_error("tokenizer encode");
    zy_mmap m = {0};
    size_t len = text ? strlen(text) : 0;
    if (in) {
        if (zy_mmap_open(&m, in) != ZY_OK) {
            tok_free(t);
            return cli_error("tokenizer encode");
        }
        text = m.data ? m.data : "";
        len = m.size;
    }
    if (args_get(opts, "--pieces")) {
        int flags = args_get(opts, "--special-tokens") ? TOK_SPECIAL : 0;
        int rc = tok_pieces(t, text, len, flags, print_piece, NULL);
        zy_mmap_close(&m);
        tok_free(t);
        return rc == ZY_OK ? 0 : cli_error("tokenizer encode");
    }
    zy_ids ids = {0};
    int flags = args_get(opts, "--special-tokens") ? TOK_SPECIAL : 0;
    double t0 = zy_now();
    int rc = tok_encode(t, text, len, flags, &ids);
    double dt = zy_now() - t0;
    if (rc == ZY_OK) {
        if (args_get(opts, "--bench")) {
            printf(
                "%zu bytes -> %zu tokens (%.3f bytes/token) in %.3f s: %.1f MB/s on %d threads\n",
                len, ids.n, ids.n ? (double)len / ids.n : 0.0, dt, len / 1e6 / dt,
                omp_get_max_threads());
        } else {
            for (size_t i = 0; i < ids.n; i++) printf(i ? " %d" : "%d", ids.data[i]);
            printf("\n");
        }
    }
    ids_free(&ids);
    zy_mmap_close(&m);
    tok_free(t);
    return rc == ZY_OK ? 0 : cli_error("tokenizer encode");
}

/* Ids separated by spaces, commas or newlines, from `where` (named in errors). */
static int parse_ids(const char *s, const char *where, zy_ids *ids) {
    while (*s) {
        while (*s == ' ' || *s == '\n' || *s == '\t' || *s == ',' || *s == '\r') s++;
        if (!*s) break;
        char *end;
        errno = 0;
        long long v = strtoll(s, &end, 10);
        if (end == s || !strchr(" \n\t,\r", *end))
            return zy_fail("%s: '%.20s' is not an id", where, s);
        if (errno == ERANGE || v < 0 || v > INT32_MAX)
            return zy_fail("%s: id %.20s is out of range", where, s);
        ids_push(ids, (int32_t)v);
        s = end;
    }
    return ZY_OK;
}

static int cmd_decode(int argc, char **argv) {
    zy_opt opts[] = {{"--tokenizer", 1, "tokenizer.json", NULL},
                     {"--ids", 1, "ids separated by spaces or commas", NULL},
                     {"--input", 1, "file of ids", NULL},
                     {"--skip-special", 0, "leave special tokens out", NULL},
                     {"--help", 0, "this help", NULL},
                     {NULL, 0, NULL, NULL}};
    const char *syn = "--tokenizer T (--ids \"1 2 3\" | --input F) [--skip-special]";
    int done = args_cli("tokenizer decode", syn, opts, argc, argv, NULL, 0, NULL);
    if (done != ARGS_RUN) return done;
    const char *tp = args_get(opts, "--tokenizer"), *s = args_get(opts, "--ids"),
               *in = args_get(opts, "--input");
    if (!tp || (!s == !in)) {
        zy_fail("needs --tokenizer and one of --ids or --input");
        return args_usage_error("tokenizer decode", syn, opts);
    }
    char *filetext = NULL;
    if (in && zy_read_file(in, &filetext, NULL) != ZY_OK) return cli_error("tokenizer decode");
    zy_ids ids = {0};
    zy_tokenizer *t = NULL;
    char *out = NULL;
    size_t n = 0;
    int rc = parse_ids(in ? filetext : s, in ? in : "--ids", &ids);
    if (rc == ZY_OK) rc = tok_load(&t, tp);
    if (rc == ZY_OK)
        rc = tok_decode(t, ids.data, ids.n, args_get(opts, "--skip-special") ? TOK_SKIP_SPECIAL : 0,
                        &out, &n);
    if (rc == ZY_OK) fwrite(out, 1, n, stdout);
    free(out);
    free(filetext);
    ids_free(&ids);
    tok_free(t);
    return rc == ZY_OK ? 0 : cli_error("tokenizer decode");
}

static int cmd_info_tok(int argc, char **argv) {
    zy_opt opts[] = {{"--tokenizer", 1, "tokenizer.json", NULL},
                     {"--help", 0, "this help", NULL},
                     {NULL, 0, NULL, NULL}};
    int done = args_cli("tokenizer info", "--tokenizer T", opts, argc, argv, NULL, 0, NULL);
    if (done != ARGS_RUN) return done;
    if (!args_get(opts, "--tokenizer")) {
        zy_fail("needs --tokenizer");
        return args_usage_error("tokenizer info", "--tokenizer T", opts);
    }
    zy_tokenizer *t;
    if (tok_load(&t, args_get(opts, "--tokenizer")) != ZY_OK) return cli_error("tokenizer info");
    char desc[1024];
    tok_describe(t, desc, sizeof desc);
    printf("ids %d, merges %d\n%s\n", tok_vocab_size(t), tok_n_merges(t), desc);
    int32_t sp[3] = {tok_bos_id(t), tok_eos_id(t), tok_pad_id(t)};
    const char *names[3] = {"bos", "eos", "pad"};
    for (int i = 0; i < 3; i++)
        printf("%s %d %s\n", names[i], sp[i], sp[i] >= 0 ? tok_token_text(t, sp[i]) : "(none)");
    tok_free(t);
    return 0;
}

int cmd_tokenizer(int argc, char **argv) {
    static const zy_subcmd subs[] = {
        {"train", cmd_train_tok, "learn a byte-level BPE tokenizer from text files"},
        {"encode", cmd_encode, "print the ids of a text"},
        {"decode", cmd_decode, "print the text of ids"},
        {"info", cmd_info_tok, "vocabulary size and special tokens of a tokenizer.json"},
        {NULL, NULL, NULL},
    };
    return args_dispatch("tokenizer", subs, argc, argv);
}
