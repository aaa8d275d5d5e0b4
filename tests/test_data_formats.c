/* Tests of the data formats and the data's consistency checks, against fixtures written without
 * zayac's code (scripts/make_data_fixtures.py: HF `tokenizers` ids, Python's gzip, the zstd
 * command, Megatron files packed with struct):
 *   - `zayac data prepare` on JSONL (plain, gzip in two members, zstd, another text field), a
 *     gzip text file and a folder of them gives exactly HF's ids of each document + eos;
 *   - bad JSONL lines and damaged compressed files are errors naming the file (and line), exit 2;
 *     --skip-bad-lines counts them; left-out files and an empty split are reported; existing
 *     output needs --force;
 *   - a Megatron dataset loads as the tokens written, every damaged variant is refused by name,
 *     and `zayac train` trains on one;
 *   - train and eval refuse data written by another tokenizer or holding ids past the model's
 *     vocabulary, before any step. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "data/instream.h"
#include "data/loader.h"
#include "data/shard.h"
#include "spawn_util.h"

#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static const char *bin;
static char tmp[64], fix[512];
static cJSON *expected; /* tests/fixtures/data/expected.json */

#define ARGS(...) ((const char *const[]){__VA_ARGS__, NULL})

static const char *fx(char *buf, const char *name) { /* buf: 768 bytes */
    snprintf(buf, 768, "%s/%s", fix, name);
    return buf;
}

static const char *tp(char *buf, const char *name) { /* buf: 768 bytes */
    snprintf(buf, 768, "%s/%s", tmp, name);
    return buf;
}

static run_result run(const char *const *args) {
    return spawn_capture(bin, tmp, args);
}

/* Runs and expects exit status `code` with each phrase (may be NULL) in stdout or stderr. */
static void expect_run(const char *const *args, int code, const char *p1, const char *p2) {
    run_result r = run(args);
    const char *ph[2] = {p1, p2}, *missing = NULL;
    for (int i = 0; i < 2; i++)
        if (ph[i] && !strstr(r.out, ph[i]) && !strstr(r.err, ph[i])) missing = ph[i];
    if (r.code == code && !missing) {
        result_free(&r);
        return;
    }
    char msg[4096];
    snprintf(msg, sizeof msg, "zayac %s %s: exit %d (expected %d)%s%s%s\n%s%s", args[0], args[1],
             r.code, code, missing ? ", no \"" : "", missing ? missing : "", missing ? "\" in" : "",
             r.out, r.err);
    result_free(&r);
    fail_msg("%s", msg);
}

static void write_file(const char *path, const void *data, size_t n) {
    assert_int_equal(zy_write_file_atomic(path, data, n), ZY_OK);
}

static char *read_file(const char *path, size_t *n) {
    char *s;
    assert_int_equal(zy_read_file(path, &s, n), ZY_OK);
    return s;
}

/* ---- expected ids ---- */

typedef struct {
    int32_t *d;
    size_t n;
} ids;

static void ids_add(ids *v, int32_t x) {
    v->d = zy_realloc(v->d, (v->n + 1) * sizeof *v->d);
    v->d[v->n++] = x;
}

/* HF's ids of the documents in expected[key], each followed by eos, `times` times over. */
static ids expected_stream(const char *key, int times) {
    ids v = {0};
    int eos = cJSON_GetObjectItem(expected, "eos")->valueint;
    for (int t = 0; t < times; t++) {
        const cJSON *doc;
        cJSON_ArrayForEach(doc, cJSON_GetObjectItem(expected, key)) {
            const cJSON *id;
            cJSON_ArrayForEach(id, doc) ids_add(&v, id->valueint);
            ids_add(&v, eos);
        }
    }
    return v;
}

/* Every token of a split's shards, in shard order. */
static ids split_tokens(const char *dir, const char *split) {
    ids v = {0};
    for (int k = 0;; k++) {
        char path[768];
        snprintf(path, sizeof path, "%s/%s_%06d.bin", dir, split, k);
        if (!zy_path_exists(path)) break;
        zy_shard s;
        assert_int_equal(shard_open(&s, path, 1), ZY_OK);
        v.d = zy_realloc(v.d, (v.n + s.h.ntokens + 1) * sizeof *v.d);
        shard_read(&s, 0, s.h.ntokens, v.d + v.n);
        v.n += s.h.ntokens;
        shard_close(&s);
    }
    return v;
}

static void assert_ids_equal(ids got, ids want) {
    assert_int_equal(got.n, want.n);
    for (size_t i = 0; i < want.n; i++)
        if (got.d[i] != want.d[i]) fail_msg("id %zu: %d, HF says %d", i, got.d[i], want.d[i]);
    free(got.d);
    free(want.d);
}

/* Prepares inputs (all documents to train) into tmp/out and checks the ids against HF's. */
static void check_prepared(const char *const *args, const char *out, const char *key, int times) {
    expect_run(args, 0, NULL, NULL);
    assert_ids_equal(split_tokens(out, "train"), expected_stream(key, times));
}

/* ---- JSONL and compression ---- */

static void test_prepare_formats_match_hf(void **state) {
    (void)state;
    char tok[768], in[768], out[768], in2[768];
    fx(tok, "tok.json");
    static const char *const jsonl[] = {"docs.jsonl", "docs.jsonl.gz", "docs.jsonl.zst"};
    for (int i = 0; i < 3; i++) {
        char name[32];
        snprintf(name, sizeof name, "fmt%d", i);
        tp(out, name);
        check_prepared(ARGS("data", "prepare", "--tokenizer", tok, "--input", fx(in, jsonl[i]),
                            "--out", out, "--val-fraction", "0"),
                       out, "docs", 1);
    }
    tp(out, "content");
    check_prepared(ARGS("data", "prepare", "--tokenizer", tok, "--input", fx(in, "content.jsonl"),
                        "--out", out, "--val-fraction", "0", "--text-field", "content"),
                   out, "docs", 1);
    tp(out, "lines");
    check_prepared(ARGS("data", "prepare", "--tokenizer", tok, "--input", fx(in, "lines.txt.gz"),
                        "--out", out, "--val-fraction", "0", "--doc-sep", "line"),
                   out, "lines", 1);
    /* --format jsonl reads a file whose name does not say so */
    char renamed[768];
    size_t n;
    char *b = read_file(fx(in, "docs.jsonl.zst"), &n);
    write_file(tp(renamed, "records.dat"), b, n);
    free(b);
    tp(out, "forced");
    check_prepared(ARGS("data", "prepare", "--tokenizer", tok, "--input", renamed, "--out", out,
                        "--val-fraction", "0", "--format", "jsonl"),
                   out, "docs", 1);

    /* a folder: both compressed files in name order; a symlink, a binary file and a hidden file
     * are left out and reported */
    char dir[768], p[1024];
    assert_int_equal(zy_mkdirs(tp(dir, "folder")), ZY_OK);
    static const char *const copies[] = {"docs.jsonl.gz", "docs.jsonl.zst"};
    for (int i = 0; i < 2; i++) {
        b = read_file(fx(in, copies[i]), &n);
        snprintf(p, sizeof p, "%s/%s", dir, copies[i]);
        write_file(p, b, n);
        free(b);
    }
    snprintf(p, sizeof p, "%s/link.jsonl", dir);
    assert_int_equal(symlink(fx(in2, "docs.jsonl"), p), 0);
    snprintf(p, sizeof p, "%s/index.dat", dir);
    write_file(p, "\x01\x00\x02\x00", 4);
    snprintf(p, sizeof p, "%s/.hidden.jsonl", dir);
    write_file(p, "{}\n", 3);
    tp(out, "from_folder");
    const char *const *args = ARGS("data", "prepare", "--tokenizer", tok, "--input", dir, "--out",
                                   out, "--val-fraction", "0");
    run_result r = run(args);
    assert_int_equal(r.code, 0);
    assert_non_null(strstr(r.out, "1 binary files"));
    assert_non_null(strstr(r.out, "index.dat"));
    assert_non_null(strstr(r.out, "1 symlinks"));
    assert_non_null(strstr(r.out, "link.jsonl"));
    assert_non_null(strstr(r.out, "1 hidden files"));
    assert_non_null(strstr(r.out, "2 files (2 JSONL, 2 compressed)"));
    result_free(&r);
    assert_ids_equal(split_tokens(out, "train"), expected_stream("docs", 2));
}

/* A JSONL file of good records with `bad` as line 3. */
static void write_with_bad_line(const char *path, const char *bad) {
    char text[512];
    snprintf(text, sizeof text,
             "{\"text\": \"one\"}\n{\"text\": \"two\"}\n%s\n{\"text\": \"four\"}\n", bad);
    write_file(path, text, strlen(text));
}

static void test_jsonl_errors_and_skip(void **state) {
    (void)state;
    char tok[768], bad[768], out[768];
    fx(tok, "tok.json");
    tp(bad, "bad.jsonl");
    tp(out, "never");
    static const char *const lines[][2] = {
        {"{\"text\": \"unterminated}", "not valid JSON"},
        {"{\"body\": \"no text field\"}", "no \"text\" field"},
        {"{\"text\": 42}", "\"text\" is a number, expected a string"},
        {"{\"text\": null}", "\"text\" is null"},
        {"[\"text\", \"an array\"]", "an array, expected a JSON object"},
        {"{\"text\": \"a\"} {\"text\": \"b\"}", "more than one JSON value"},
        {"{\"text\": \"a\\u0000b\"}", "NUL"},
    };
    char where[800];
    snprintf(where, sizeof where, "%s:3:", bad);
    for (size_t i = 0; i < sizeof lines / sizeof lines[0]; i++) {
        write_with_bad_line(bad, lines[i][0]);
        expect_run(ARGS("data", "prepare", "--tokenizer", tok, "--input", bad, "--out", out), 2,
                   where, lines[i][1]);
        assert_false(zy_path_exists(out));
    }
    /* skipped only when asked, and counted: 4 bad lines of 7, 3 documents left */
    const char text[] = "{\"text\": \"one\"}\nnot json\n{\"text\": 1}\n\n{\"text\": \"two\"}\n"
                        "{\"other\": \"x\"}\n{\"text\": \"\"}\n[1]\n{\"text\": \"three\"}";
    write_file(bad, text, strlen(text));
    snprintf(where, sizeof where, "the first: %s:2: not valid JSON", bad);
    tp(out, "skipped");
    expect_run(ARGS("data", "prepare", "--tokenizer", tok, "--input", bad, "--out", out,
                    "--val-fraction", "0", "--skip-bad-lines"),
               0, "skipped 4 bad JSONL lines", where);
    expect_run(
        ARGS("data", "check", (snprintf(where, sizeof where, "%s/train_000000.bin", out), where)),
        0, "3 docs", NULL);
    /* every line bad: no documents, an error even with the flag */
    write_file(bad, "oops\n", 5);
    tp(out, "all_bad");
    expect_run(ARGS("data", "prepare", "--tokenizer", tok, "--input", bad, "--out", out,
                    "--skip-bad-lines"),
               2, "every record was bad", NULL);
}

static void test_damaged_compressed(void **state) {
    (void)state;
    char tok[768], in[768], bad[768], out[768];
    fx(tok, "tok.json");
    tp(out, "never");
    static const struct {
        const char *src, *name;
        int cut, flip;
        const char *phrase;
    } cases[] = {
        {"docs.jsonl.gz", "cut.jsonl.gz", 10, -1, "truncated gzip"},
        {"docs.jsonl.gz", "flip.jsonl.gz", 0, 30, "corrupt gzip"},
        {"docs.jsonl.zst", "cut.jsonl.zst", 10, -1, "truncated zstd"},
        {"docs.jsonl.zst", "flip.jsonl.zst", 0, 40, "corrupt zstd"},
        {"lines.txt.gz", "cut.txt.gz", 5, -1, "truncated gzip"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        size_t n;
        char *b = read_file(fx(in, cases[i].src), &n);
        if (cases[i].flip >= 0) b[cases[i].flip] ^= 0x5A;
        write_file(tp(bad, cases[i].name), b, n - (size_t)cases[i].cut);
        free(b);
        expect_run(ARGS("data", "prepare", "--tokenizer", tok, "--input", bad, "--out", out), 2,
                   bad, cases[i].phrase);
        assert_false(zy_path_exists(out));
    }
    /* the stream reader by itself: a gzip member boundary is invisible to the reader */
    zy_instream *s;
    assert_int_equal(instream_open(&s, fx(in, "docs.jsonl.gz")), ZY_OK);
    assert_int_equal(instream_kind(s), INSTREAM_GZIP);
    instream_close(s);
    char *plain, *unz;
    size_t np, nu;
    plain = read_file(fx(in, "docs.jsonl"), &np);
    assert_int_equal(instream_read_all(fx(in, "docs.jsonl.zst"), &unz, &nu, NULL), ZY_OK);
    assert_int_equal(nu, np);
    assert_memory_equal(unz, plain, np);
    free(unz);
    free(plain);
}

static void test_force_and_empty_split(void **state) {
    (void)state;
    char tok[768], in[768], out[768], one[768], newtok[768];
    fx(tok, "tok.json");
    fx(in, "docs.jsonl");
    tp(out, "forced_out");
    expect_run(ARGS("data", "prepare", "--tokenizer", tok, "--input", in, "--out", out), 0, NULL,
               NULL);
    expect_run(ARGS("data", "prepare", "--tokenizer", tok, "--input", in, "--out", out), 2, out,
               "--force");
    expect_run(ARGS("data", "prepare", "--tokenizer", tok, "--input", in, "--out", out, "--force"),
               0, NULL, NULL);
    /* a folder of someone else's is not replaced even with --force */
    char mine[768];
    tp(mine, "forced_out/../not_data");
    assert_int_equal(zy_mkdirs(mine), ZY_OK);
    expect_run(ARGS("data", "prepare", "--tokenizer", tok, "--input", in, "--out", mine, "--force"),
               2, "not a zayac data folder", NULL);
    /* one document: the validation split is empty, and the warning says why */
    write_file(tp(one, "one.jsonl"), "{\"text\": \"alone\"}\n", 18);
    tp(out, "one_doc");
    expect_run(ARGS("data", "prepare", "--tokenizer", tok, "--input", one, "--out", out), 0,
               "warning: the validation split is empty", "1 document, val-fraction 0.01 -> 0 docs");
    /* tokenizer train does not overwrite either */
    write_file(tp(newtok, "trained.json"), "keep", 4);
    expect_run(ARGS("tokenizer", "train", "--input", in, "--vocab-size", "300", "--out", newtok), 2,
               newtok, "--force");
    size_t n;
    char *kept = read_file(newtok, &n);
    assert_int_equal(n, 4);
    free(kept);
    expect_run(ARGS("tokenizer", "train", "--input", in, "--vocab-size", "300", "--out", newtok,
                    "--force"),
               0, NULL, NULL);
}

/* tokenizer train reads JSONL and compressed files as documents: training on docs.jsonl.gz gives
 * the tokenizer that training on the same texts as one file each gives. */
static void test_tokenizer_train_reads_jsonl(void **state) {
    (void)state;
    char dir[768], p[1024], in[768], a[768], b[768];
    assert_int_equal(zy_mkdirs(tp(dir, "texts")), ZY_OK);
    int i = 0;
    const cJSON *t;
    cJSON_ArrayForEach(t, cJSON_GetObjectItem(expected, "texts")) {
        snprintf(p, sizeof p, "%s/doc%02d.txt", dir, i++);
        write_file(p, t->valuestring, strlen(t->valuestring));
    }
    expect_run(ARGS("tokenizer", "train", "--input", dir, "--doc-sep", "file", "--vocab-size",
                    "320", "--out", tp(a, "from_texts.json")),
               0, NULL, NULL);
    expect_run(ARGS("tokenizer", "train", "--input", fx(in, "docs.jsonl.gz"), "--vocab-size", "320",
                    "--out", tp(b, "from_jsonl.json")),
               0, NULL, NULL);
    size_t na, nb;
    char *ta = read_file(a, &na), *tb = read_file(b, &nb);
    assert_int_equal(na, nb);
    assert_memory_equal(ta, tb, na);
    free(ta);
    free(tb);
}

/* ---- Megatron ---- */

/* The sequences of expected.json's megatron[name], back to back. */
static ids megatron_stream(const char *name, uint64_t *ndocs) {
    const cJSON *m = cJSON_GetObjectItem(cJSON_GetObjectItem(expected, "megatron"), name);
    ids v = {0};
    const cJSON *seq, *id;
    cJSON_ArrayForEach(seq, cJSON_GetObjectItem(m, "sequences")) cJSON_ArrayForEach(id, seq)
        ids_add(&v, id->valueint);
    *ndocs = (uint64_t)cJSON_GetArraySize(cJSON_GetObjectItem(m, "doc_idx")) - 1;
    return v;
}

static void test_megatron_tokens(void **state) {
    (void)state;
    static const char *const names[] = {"mg_u16", "mg_i32"};
    for (int k = 0; k < 2; k++) {
        char idx[768], name[64];
        snprintf(name, sizeof name, "%s.idx", names[k]);
        fx(idx, name);
        uint64_t ndocs;
        ids want = megatron_stream(names[k], &ndocs);
        zy_shard s;
        if (shard_open(&s, idx, 1) != ZY_OK) fail_msg("%s", zy_errmsg());
        assert_int_equal(s.h.ntokens, want.n);
        assert_int_equal(s.h.ndocs, ndocs);
        assert_int_equal(s.h.vocab_size, 0);
        shard_close(&s);
        /* the loader, in order, serves windows [k*T, k*T + T+1) of the stream */
        const int T = 8;
        zy_loader_opts o = loader_defaults();
        o.B = 1;
        o.T = T;
        o.shuffle = 0;
        zy_loader_source src = {idx, NULL, 1};
        zy_loader *l;
        if (loader_open(&l, &src, 1, &o) != ZY_OK) fail_msg("%s", zy_errmsg());
        uint64_t W = loader_windows(l, 0);
        assert_int_equal(W, (want.n - 1) / T);
        int32_t row[9];
        for (uint64_t w = 0; w < W; w++) {
            loader_next(l, row, NULL);
            assert_memory_equal(row, want.d + w * T, sizeof row);
        }
        assert_int_equal(loader_tokenizer_hash(l, NULL), 0);
        loader_free(l);
        free(want.d);
    }
}

/* Writes a copy of the mg_u16 pair as tmp/bad.{idx,bin} with `patch` applied to the index at
 * `at` (n bytes; NULL: none), the index cut by idx_cut bytes and the .bin by bin_cut (< 0: 4
 * bytes added), then expects opening it to fail with phrase. */
static void expect_megatron_error(size_t at, const void *patch, size_t n, size_t idx_cut,
                                  int bin_cut, const char *phrase) {
    char src[768], dst[768];
    size_t ni, nb;
    char *idx = read_file(fx(src, "mg_u16.idx"), &ni), *b = read_file(fx(src, "mg_u16.bin"), &nb);
    b = zy_realloc(b, nb + 4);
    memset(b + nb, 0, 4);
    if (patch) memcpy(idx + at, patch, n);
    write_file(tp(dst, "bad.idx"), idx, ni - idx_cut);
    write_file(tp(dst, "bad.bin"), b, bin_cut < 0 ? nb + 4 : nb - (size_t)bin_cut);
    free(idx);
    free(b);
    zy_shard s;
    tp(dst, "bad.idx");
    assert_int_equal(shard_open(&s, dst, 1), ZY_ERR);
    if (!strstr(zy_errmsg(), phrase) || !strstr(zy_errmsg(), "bad."))
        fail_msg("expected \"%s\" naming the file, got: %s", phrase, zy_errmsg());
}

static void test_megatron_damage(void **state) {
    (void)state;
    const uint64_t two = 2, huge = (uint64_t)1 << 62, far = 1000000;
    const int32_t big = INT32_MAX, neg = -5;
    const uint8_t f32 = 7, nine = 9;
    const size_t S = 12, sizes = 34, ptrs = sizes + 4 * S, docs = ptrs + 8 * S;
    expect_megatron_error(0, "MMIDIDY", 7, 0, 0, "not a Megatron index");
    expect_megatron_error(9, &two, 8, 0, 0, "version 2");
    expect_megatron_error(17, &f32, 1, 0, 0, "floating point");
    expect_megatron_error(17, &nine, 1, 0, 0, "not a Megatron type");
    expect_megatron_error(0, NULL, 0, 8, 0, "truncated or corrupt");      /* index cut */
    expect_megatron_error(0, NULL, 0, 200, 0, "truncated");               /* inside the header */
    expect_megatron_error(18, &huge, 8, 0, 0, "truncated or corrupt");    /* count overflows */
    expect_megatron_error(sizes + 8, &big, 4, 0, 0, "runs past the end"); /* size overflows */
    expect_megatron_error(sizes + 8, &neg, 4, 0, 0, "expected >= 0");
    expect_megatron_error(ptrs + 8 * 5, &far, 8, 0, 0, "sequences must follow each other");
    expect_megatron_error(0, NULL, 0, 0, 2, "runs past the end"); /* .bin cut */
    expect_megatron_error(0, NULL, 0, 0, -1, "does not match");   /* .bin longer */
    expect_megatron_error(docs + 8, &far, 8, 0, 0, "document index entry 1");
    expect_megatron_error(docs, &two, 8, 0, 0, "document index entry 0");
    /* a negative int32 token; a missing .bin */
    char src[768], dst[768];
    size_t ni, nb;
    char *idx = read_file(fx(src, "mg_i32.idx"), &ni), *b = read_file(fx(src, "mg_i32.bin"), &nb);
    memcpy(b + 12, &neg, 4);
    write_file(tp(dst, "neg.idx"), idx, ni);
    write_file(tp(dst, "neg.bin"), b, nb);
    zy_shard s;
    assert_int_equal(shard_open(&s, tp(dst, "neg.idx"), 1), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "token 3 is -5"));
    assert_non_null(strstr(zy_errmsg(), "neg.bin"));
    write_file(tp(dst, "lone.idx"), idx, ni);
    assert_int_equal(shard_open(&s, dst, 1), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "lone.bin"));
    free(idx);
    free(b);
    /* a .bin named instead of its .idx: the error says what to do */
    assert_int_equal(shard_open(&s, fx(src, "mg_u16.bin"), 1), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "name its .idx"));
}

/* ---- training and evaluation refuse data that does not fit ---- */

/* A small model config.json with vocab_size V, as a file and as inline JSON text. */
static const char *model_json(int V) {
    static char text[1024];
    snprintf(text, sizeof text,
             "{\"model_type\": \"zaya\", \"vocab_size\": %d, \"hidden_size\": 32,"
             " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
             " \"head_dim\": 32, \"num_experts\": 3, \"moe_intermediate_size\": 16,"
             " \"router_hidden_size\": 8, \"max_position_embeddings\": 64, \"pad_token_id\": 0,"
             " \"bos_token_id\": 0, \"eos_token_id\": 0}",
             V);
    return text;
}

static const char *train_config(char *path, const char *name, int V, const char *data,
                                const char *tokenizer, int eval_interval) {
    char text[4096], run_dir[768];
    tp(run_dir, name);
    snprintf(text, sizeof text,
             "{\"model\": %s, \"data\": \"%s\", \"tokenizer\": \"%s\", \"batch_size\": 2,"
             " \"seq_len\": 8, \"steps\": 2, \"eval_interval\": %d, \"eval_batches\": 1,"
             " \"checkpoint_interval\": 0, \"out_dir\": \"%s\", \"schedule\": {\"warmup\": 1},"
             " \"device\": \"cpu\", \"threads\": 2}",
             model_json(V), data, tokenizer, eval_interval, run_dir);
    char file[96];
    snprintf(file, sizeof file, "%s.json", name);
    write_file(tp(path, file), text, strlen(text));
    return path;
}

static void test_train_eval_refuse_misfits(void **state) {
    (void)state;
    char tok[768], in[768], data[768], other[768], cfg[768], ckpt[768];
    fx(tok, "tok.json");
    tp(data, "fit_data");
    expect_run(ARGS("data", "prepare", "--tokenizer", tok, "--input", fx(in, "docs.jsonl"), "--out",
                    data, "--val-fraction", "0.5"),
               0, NULL, NULL);
    /* another tokenizer, trained by zayac on the same text */
    tp(other, "other_tok.json");
    expect_run(ARGS("tokenizer", "train", "--input", in, "--vocab-size", "300", "--out", other), 0,
               NULL, NULL);
    ids all = split_tokens(data, "train");
    int32_t top = 0;
    for (size_t i = 0; i < all.n; i++) top = all.d[i] > top ? all.d[i] : top;
    free(all.d);
    assert_true(top > 0);
    /* the run's tokenizer is not the data's: exit 2 naming both, no step taken */
    train_config(cfg, "wrong_tok", 400, data, other, 0);
    expect_run(ARGS("train", "--config", cfg), 2, other, "is not the tokenizer the data was");
    expect_run(ARGS("train", "--config", cfg), 2, "fit_data/train_000000.bin", NULL);
    assert_false(zy_path_exists(tp(ckpt, "wrong_tok/metrics.jsonl")));
    /* ids past the model's vocabulary (top is the largest id: vocab_size top is one short) */
    train_config(cfg, "small_vocab", top, data, "", 0);
    char holds[64];
    snprintf(holds, sizeof holds, "holds token id %d", top);
    expect_run(ARGS("train", "--config", cfg), 2, holds, "the training data (");
    expect_run(ARGS("train", "--config", cfg), 2, data, "vocab_size");
    assert_false(zy_path_exists(tp(ckpt, "small_vocab/metrics.jsonl")));
    /* the fitting run trains, and evaluates; eval then refuses a model folder whose tokenizer is
     * not the data's */
    train_config(cfg, "fits", 400, data, tok, 1);
    expect_run(ARGS("train", "--config", cfg), 0, "done: 2 steps", NULL);
    char model[768];
    tp(model, "fits/checkpoints/step_000000002");
    if (!zy_path_exists(model)) fail_msg("no checkpoint %s", model);
    expect_run(ARGS("eval", "--model", model, "--data", data, "--batches", "1", "--batch-size", "1",
                    "--seq-len", "8"),
               0, "validation loss", NULL);
    char model_tok[800];
    snprintf(model_tok, sizeof model_tok, "%s/model/tokenizer.json", model); /* its HF folder */
    size_t n;
    char *b = read_file(other, &n);
    write_file(model_tok, b, n);
    free(b);
    expect_run(ARGS("eval", "--model", model, "--data", data, "--batches", "1", "--batch-size", "1",
                    "--seq-len", "8"),
               2, "the model's tokenizer", "is not the tokenizer the data was");
}

static void test_train_on_megatron(void **state) {
    (void)state;
    char idx[768], cfg[768];
    fx(idx, "mg_u16.idx");
    train_config(cfg, "megatron", 400, idx, "", 1);
    expect_run(ARGS("train", "--config", cfg), 0, "done: 2 steps",
               "the validation loss reads its training tokens");
    /* its ids reach 399: a model of 399 ids is refused */
    train_config(cfg, "megatron_small", 399, idx, "", 0);
    expect_run(ARGS("train", "--config", cfg), 2, "holds token id 399", NULL);
}

static int setup(void **state) {
    (void)state;
    bin = getenv("ZAYAC_BIN");
    const char *root = getenv("ZAYAC_ROOT");
    if (!bin || !root) {
        fprintf(stderr, "test_data_formats: set ZAYAC_BIN and ZAYAC_ROOT (make test does)\n");
        return -1;
    }
    snprintf(fix, sizeof fix, "%s/tests/fixtures/data", root);
    snprintf(tmp, sizeof tmp, "/tmp/zy_formats_XXXXXX");
    if (!mkdtemp(tmp)) return -1;
    char path[768], *text;
    if (zy_read_file(fx(path, "expected.json"), &text, NULL) != ZY_OK) return -1;
    expected = cJSON_Parse(text);
    free(text);
    spawn_sanitizer_exit(99); /* a sanitizer report is none of the statuses checked */
    return expected ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    cJSON_Delete(expected);
    return zy_remove_tree(tmp) == ZY_OK ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_prepare_formats_match_hf),
        cmocka_unit_test(test_jsonl_errors_and_skip),
        cmocka_unit_test(test_damaged_compressed),
        cmocka_unit_test(test_force_and_empty_split),
        cmocka_unit_test(test_tokenizer_train_reads_jsonl),
        cmocka_unit_test(test_megatron_tokens),
        cmocka_unit_test(test_megatron_damage),
        cmocka_unit_test(test_train_eval_refuse_misfits),
        cmocka_unit_test(test_train_on_megatron),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
