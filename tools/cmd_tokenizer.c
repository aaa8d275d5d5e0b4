/* zayac tokenizer: train a byte-level BPE tokenizer, encode and decode with one, show one. */
#include "args.h"
#include "base/err.h"
#include "base/fileio.h"
#include "base/timer.h"
#include "cmds.h"
#include "data/pretok.h"
#include "data/tokenizer.h"

#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_INPUTS   4096
#define MAX_SPECIALS 64

static int fail(const char *what) {
    fprintf(stderr, "zayac tokenizer %s: %s\n", what, zy_errmsg());
    return 1;
}

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
        {NULL, 0, NULL, NULL}};
    const char *pos[MAX_INPUTS], *inputs[MAX_INPUTS + 1];
    int npos = 0;
    if (argc > 1 && !strcmp(argv[1], "--help")) {
        args_usage("tokenizer train", "--input FILE... --vocab-size N --out tokenizer.json", opts);
        return 0;
    }
    if (args_parse(argc, argv, opts, pos, MAX_INPUTS, &npos) != ZY_OK) {
        args_usage("tokenizer train", "--input FILE... --vocab-size N --out tokenizer.json", opts);
        return fail("train");
    }
    int n = gather_inputs(opts, pos, npos, inputs);
    const char *outp = args_get(opts, "--out");
    long long vocab, minf;
    zy_docsep sep = DOCSEP_FILE;
    if (args_int(opts, "--vocab-size", 4096, &vocab) != ZY_OK ||
        args_int(opts, "--min-frequency", 2, &minf) != ZY_OK)
        return fail("train");
    if (args_get(opts, "--doc-sep") && docsep_parse(args_get(opts, "--doc-sep"), &sep) != ZY_OK)
        return fail("train");
    if (!n || !outp) {
        zy_fail("needs --input and --out");
        return fail("train");
    }
    if (vocab < 1 || vocab > (1 << 30)) {
        zy_fail("--vocab-size %lld is out of range", vocab);
        return fail("train");
    }
    char **files;
    int nfiles;
    if (docs_expand_inputs(inputs, n, &files, &nfiles) != ZY_OK) return fail("train");
    double t0 = zy_now();
    zy_tokenizer *t;
    size_t bytes = 0;
    int rc = tok_train_files((const char *const *)files, nfiles, sep, (int32_t)vocab,
                             nsp ? specials : NULL, nsp, (int)minf, &t, &bytes);
    docs_free_paths(files, nfiles);
    if (rc != ZY_OK) return fail("train");
    double dt = zy_now() - t0;
    if (tok_save(t, outp) != ZY_OK) {
        tok_free(t);
        return fail("train");
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
    char *s = malloc(2 * len + 1);
    bytelevel_encode((const uint8_t *)piece, len, s);
    printf("%s\n", s);
    free(s);
    return 0;
}

/* The GPT-2 pattern's pieces of a text, for checking the split against HF's. */
static int print_pieces(const char *text, size_t len) {
    zy_pretok p;
    zy_pretok_matcher m;
    ZY_TRY(pretok_init(&p, NULL));
    pretok_matcher_init(&m, &p);
    int rc = pretok_split(&p, &m, text, len, print_piece, NULL);
    pretok_matcher_free(&m);
    pretok_free(&p);
    return rc;
}

static int cmd_encode(int argc, char **argv) {
    zy_opt opts[] = {
        {"--tokenizer", 1, "tokenizer.json", NULL},
        {"--text", 1, "text to encode", NULL},
        {"--input", 1, "file whose bytes to encode", NULL},
        {"--special-tokens", 0, "match added tokens in the text (as HF encode)", NULL},
        {"--bench", 0, "print throughput instead of ids", NULL},
        {"--pieces", 0, "print the pre-tokenizer's pieces (byte-level), one a line", NULL},
        {NULL, 0, NULL, NULL}};
    const char *syn = "--tokenizer T (--text S | --input F) [--special-tokens] [--bench|--pieces]";
    if (args_parse(argc, argv, opts, NULL, 0, NULL) != ZY_OK) {
        args_usage("tokenizer encode", syn, opts);
        return fail("encode");
    }
    const char *tp = args_get(opts, "--tokenizer"), *text = args_get(opts, "--text"),
               *in = args_get(opts, "--input");
    if (!tp || (!text == !in)) {
        args_usage("tokenizer encode", syn, opts);
        zy_fail("needs --tokenizer and one of --text or --input");
        return fail("encode");
    }
    zy_tokenizer *t;
    if (tok_load(&t, tp) != ZY_OK) return fail("encode");
    zy_mmap m = {0};
    size_t len = text ? strlen(text) : 0;
    if (in) {
        if (zy_mmap_open(&m, in) != ZY_OK) {
            tok_free(t);
            return fail("encode");
        }
        text = m.data ? m.data : "";
        len = m.size;
    }
    if (args_get(opts, "--pieces")) {
        int rc = print_pieces(text, len);
        zy_mmap_close(&m);
        tok_free(t);
        return rc == ZY_OK ? 0 : fail("encode");
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
    return rc == ZY_OK ? 0 : fail("encode");
}

static int parse_ids(const char *s, zy_ids *ids) {
    while (*s) {
        while (*s == ' ' || *s == '\n' || *s == '\t' || *s == ',' || *s == '\r') s++;
        if (!*s) break;
        char *end;
        long v = strtol(s, &end, 10);
        if (end == s) return zy_fail("ids: '%.20s' is not an integer", s);
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
                     {NULL, 0, NULL, NULL}};
    const char *syn = "--tokenizer T (--ids \"1 2 3\" | --input F) [--skip-special]";
    if (args_parse(argc, argv, opts, NULL, 0, NULL) != ZY_OK) {
        args_usage("tokenizer decode", syn, opts);
        return fail("decode");
    }
    const char *tp = args_get(opts, "--tokenizer"), *s = args_get(opts, "--ids"),
               *in = args_get(opts, "--input");
    if (!tp || (!s == !in)) {
        args_usage("tokenizer decode", syn, opts);
        zy_fail("needs --tokenizer and one of --ids or --input");
        return fail("decode");
    }
    char *filetext = NULL;
    if (in && zy_read_file(in, &filetext, NULL) != ZY_OK) return fail("decode");
    zy_ids ids = {0};
    zy_tokenizer *t = NULL;
    char *out = NULL;
    size_t n = 0;
    int rc = parse_ids(in ? filetext : s, &ids);
    if (rc == ZY_OK) rc = tok_load(&t, tp);
    if (rc == ZY_OK)
        rc = tok_decode(t, ids.data, ids.n, args_get(opts, "--skip-special") ? TOK_SKIP_SPECIAL : 0,
                        &out, &n);
    if (rc == ZY_OK) fwrite(out, 1, n, stdout);
    free(out);
    free(filetext);
    ids_free(&ids);
    tok_free(t);
    return rc == ZY_OK ? 0 : fail("decode");
}

static int cmd_info_tok(int argc, char **argv) {
    zy_opt opts[] = {{"--tokenizer", 1, "tokenizer.json", NULL}, {NULL, 0, NULL, NULL}};
    if (args_parse(argc, argv, opts, NULL, 0, NULL) != ZY_OK || !args_get(opts, "--tokenizer")) {
        args_usage("tokenizer info", "--tokenizer T", opts);
        return 2;
    }
    zy_tokenizer *t;
    if (tok_load(&t, args_get(opts, "--tokenizer")) != ZY_OK) return fail("info");
    printf("ids %d, merges %d\n", tok_vocab_size(t), tok_n_merges(t));
    int32_t sp[3] = {tok_bos_id(t), tok_eos_id(t), tok_pad_id(t)};
    const char *names[3] = {"bos", "eos", "pad"};
    for (int i = 0; i < 3; i++)
        printf("%s %d %s\n", names[i], sp[i], sp[i] >= 0 ? tok_token_text(t, sp[i]) : "(none)");
    tok_free(t);
    return 0;
}

int cmd_tokenizer(int argc, char **argv) {
    const char *sub = argc > 1 ? argv[1] : "";
    if (!strcmp(sub, "train")) return cmd_train_tok(argc - 1, argv + 1);
    if (!strcmp(sub, "encode")) return cmd_encode(argc - 1, argv + 1);
    if (!strcmp(sub, "decode")) return cmd_decode(argc - 1, argv + 1);
    if (!strcmp(sub, "info")) return cmd_info_tok(argc - 1, argv + 1);
    fprintf(stderr, "usage: zayac tokenizer train|encode|decode|info [options]  (--help for each)\n"
                    "  train   learn a byte-level BPE tokenizer from text files\n"
                    "  encode  print the ids of a text\n"
                    "  decode  print the text of ids\n"
                    "  info    vocabulary size and special tokens of a tokenizer.json\n");
    return 2;
}
