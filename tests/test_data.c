/* Tests of the data pipeline: shard files (round trip, every kind of corruption), document
 * splitting, `data prepare` (documents survive, validation disjoint from train, deterministic,
 * safe on bad input) and the loader (determinism, exact resume, mixture weights, windows inside one
 * source, one permutation per epoch, data-parallel ranks). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/rng.h"
#include "data/docs.h"
#include "data/loader.h"
#include "data/prepare.h"
#include "data/shard.h"
#include "data/tokenizer.h"

#include <cjson/cJSON.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static char tmpdir[64];

static const char *tmp_path(char *buf, const char *name) { /* buf: 256 bytes */
    snprintf(buf, 256, "%s/%s", tmpdir, name);
    return buf;
}

static void write_bytes(const char *path, const void *data, size_t n) {
    assert_int_equal(zy_write_file_atomic(path, data, n), ZY_OK);
}

/* ---- shards ---- */

static void test_shard_round_trip(void **state) {
    (void)state;
    uint32_t vocabs[2] = {1000, 100000};
    for (int k = 0; k < 2; k++) {
        char path[256];
        tmp_path(path, k ? "big.bin" : "small.bin");
        int32_t tok[777];
        zy_rng r = zy_rng_init(5, (uint64_t)k);
        for (int i = 0; i < 777; i++) tok[i] = (int32_t)zy_rng_below(&r, vocabs[k]);
        tok[0] = (int32_t)vocabs[k] - 1;
        assert_int_equal(shard_write(path, tok, 777, vocabs[k], 7, 12, 0), ZY_OK);
        zy_shard s;
        assert_int_equal(shard_open(&s, path, 1), ZY_OK);
        assert_int_equal(s.h.ntokens, 777);
        assert_int_equal(s.h.ndocs, 12);
        assert_int_equal(s.h.vocab_size, vocabs[k]);
        assert_int_equal(s.h.eos_id, 7);
        assert_int_equal(s.h.token_bytes, k ? 4 : 2);
        assert_int_equal(s.map.size, 64 + 777 * (k ? 4 : 2));
        int32_t back[777];
        shard_read(&s, 0, 777, back);
        assert_memory_equal(back, tok, sizeof tok);
        shard_read(&s, 100, 5, back);
        assert_memory_equal(back, tok + 100, 5 * sizeof(int32_t));
        shard_close(&s);
    }
}

static void expect_open_error(const char *path, const char *phrase) {
    zy_shard s;
    assert_int_equal(shard_open(&s, path, 1), ZY_ERR);
    const char *msg = zy_errmsg();
    if (!strstr(msg, path) || !strstr(msg, phrase))
        fail_msg("error should name %s and say '%s': %s", path, phrase, msg);
}

static void test_shard_corruption(void **state) {
    (void)state;
    char good[256], bad[256];
    tmp_path(good, "good.bin");
    tmp_path(bad, "bad.bin");
    int32_t tok[100];
    for (int i = 0; i < 100; i++) tok[i] = i * 3;
    assert_int_equal(shard_write(good, tok, 100, 500, 0, 1, 0), ZY_OK);
    char *img;
    size_t n;
    assert_int_equal(zy_read_file(good, &img, &n), ZY_OK);
    assert_int_equal(n, 64 + 200);

    write_bytes(bad, img, n - 1);
    expect_open_error(bad, "truncated");
    write_bytes(bad, img, 10);
    expect_open_error(bad, "shorter than a shard header");
    write_bytes(bad, img, 0);
    expect_open_error(bad, "shorter than a shard header");
    char *c = zy_malloc(n + 2);
    memcpy(c, img, n);
    c[n] = c[n + 1] = 0;
    write_bytes(bad, c, n + 2); /* trailing bytes: count and size disagree */
    expect_open_error(bad, "truncated or corrupt");
    memcpy(c, img, n);
    memcpy(c, "GGUF\0\0\0\0", 8);
    write_bytes(bad, c, n);
    expect_open_error(bad, "bad magic");
    memcpy(c, img, n);
    c[8] = 2;
    write_bytes(bad, c, n);
    expect_open_error(bad, "version");
    memcpy(c, img, n);
    c[16] = 99; /* token count 99 with 100 tokens of payload */
    write_bytes(bad, c, n);
    expect_open_error(bad, "header says 99 tokens");
    memcpy(c, img, n);
    c[64 + 50] ^= 1;
    write_bytes(bad, c, n);
    expect_open_error(bad, "checksum mismatch");
    memcpy(c, img, n);
    c[24] = 5; /* document count: a header field the size check cannot see */
    write_bytes(bad, c, n);
    expect_open_error(bad, "checksum mismatch");
    memcpy(c, img, n);
    c[36] = (char)0xF4, c[37] = 1; /* eos 500 >= vocab 500 */
    write_bytes(bad, c, n);
    expect_open_error(bad, "inconsistent");
    expect_open_error("/nonexistent/shard.bin", "cannot open");
    free(c);

    /* a bad token fails the write and leaves the existing file as it was */
    tok[3] = 500;
    assert_int_equal(shard_write(good, tok, 100, 500, 0, 1, 0), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "outside the vocabulary"));
    char *after;
    size_t n2;
    assert_int_equal(zy_read_file(good, &after, &n2), ZY_OK);
    assert_int_equal(n2, n);
    assert_memory_equal(after, img, n);
    free(after);
    free(img);
}

/* ---- documents ---- */

static void expect_docs(const char *text, zy_docsep sep, const char *const *want, size_t nwant) {
    zy_spans d = {0};
    docs_split(text, strlen(text), sep, &d);
    if (d.n != nwant) fail_msg("%s: %zu documents, expected %zu", docsep_name(sep), d.n, nwant);
    for (size_t i = 0; i < nwant; i++) {
        if (d.d[i].len != strlen(want[i]) || memcmp(d.d[i].text, want[i], d.d[i].len))
            fail_msg("%s doc %zu: '%.*s' expected '%s'", docsep_name(sep), i, (int)d.d[i].len,
                     d.d[i].text, want[i]);
    }
    spans_free(&d);
}

static void test_docs_split(void **state) {
    (void)state;
    const char *fortune = "one\nline two\n%\n\nafter blank\n%\n%\nlast % not a separator\n% \n";
    const char *f_want[] = {"one\nline two", "\nafter blank", "last % not a separator\n% "};
    expect_docs(fortune, DOCSEP_FORTUNE, f_want, 3);
    const char *blank = "\n\npara one\nstill one\n \t\npara two\r\n\r\n\n";
    const char *b_want[] = {"para one\nstill one", "para two"};
    expect_docs(blank, DOCSEP_BLANK_LINE, b_want, 2);
    const char *l_want[] = {"para one", "still one", "para two"};
    expect_docs(blank, DOCSEP_LINE, l_want, 3);
    const char *file_want[] = {blank};
    expect_docs(blank, DOCSEP_FILE, file_want, 1);
    expect_docs("", DOCSEP_FILE, NULL, 0);
    expect_docs("%\n%\n", DOCSEP_FORTUNE, NULL, 0);
    zy_docsep s;
    assert_int_equal(docsep_parse("fortune", &s), ZY_OK);
    assert_int_equal(s, DOCSEP_FORTUNE);
    assert_int_equal(docsep_parse("paragraph", &s), ZY_ERR);
}

/* ---- prepare ---- */

/* Writes two fortune files of distinct entries and a tokenizer trained on them. */
static void make_corpus(char files[2][256], char *tokpath) {
    zy_bpe_trainer *tr = bpe_trainer_new();
    zy_rng r = zy_rng_init(9, 0);
    static const char *const words[] = {"cat", "dog", "the", "a", "ran", "över", "日本", "!", "42"};
    for (int f = 0; f < 2; f++) {
        char name[32], text[20000];
        size_t n = 0;
        snprintf(name, sizeof name, "corpus%d.txt", f);
        tmp_path(files[f], name);
        for (int e = 0; e < 60; e++) {
            n += (size_t)snprintf(text + n, sizeof text - n, "entry %d of file %d:", e, f);
            int nw = 3 + (int)zy_rng_below(&r, 12);
            for (int w = 0; w < nw; w++)
                n += (size_t)snprintf(text + n, sizeof text - n, "%s%s", w % 5 ? " " : "\n",
                                      words[zy_rng_below(&r, 9)]);
            n += (size_t)snprintf(text + n, sizeof text - n, "\n%%\n");
        }
        write_bytes(files[f], text, n);
        assert_int_equal(bpe_trainer_add(tr, text, n), ZY_OK);
    }
    zy_tokenizer *t;
    assert_int_equal(bpe_trainer_finish(tr, 330, NULL, 0, 2, &t), ZY_OK);
    bpe_trainer_free(tr);
    assert_int_equal(tok_save(t, tokpath), ZY_OK);
    tok_free(t);
}

/* Decodes every shard of a split back into documents (cut at eos). */
static size_t read_split(const char *dir, const char *split, zy_tokenizer *t, char ***docs) {
    size_t nd = 0;
    *docs = NULL;
    for (int k = 0;; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/%s_%06d.bin", dir, split, k);
        if (!zy_path_exists(path)) break;
        zy_shard s;
        assert_int_equal(shard_open(&s, path, 1), ZY_OK);
        assert_true(s.h.ntokens <= 300);
        int32_t *tok = zy_malloc((s.h.ntokens + 1) * sizeof *tok);
        shard_read(&s, 0, s.h.ntokens, tok);
        assert_int_equal(tok[s.h.ntokens - 1], tok_eos_id(t)); /* documents end in shards */
        uint64_t start = 0, ndocs = 0;
        for (uint64_t i = 0; i < s.h.ntokens; i++) {
            if (tok[i] != tok_eos_id(t)) continue;
            char *text;
            assert_int_equal(tok_decode(t, tok + start, i - start, 0, &text, NULL), ZY_OK);
            *docs = zy_realloc(*docs, (nd + 1) * sizeof **docs);
            (*docs)[nd++] = text;
            start = i + 1;
            ndocs++;
        }
        assert_int_equal(ndocs, s.h.ndocs);
        free(tok);
        shard_close(&s);
    }
    return nd;
}

static int cmp_str(const void *a, const void *b) {
    return strcmp(*(char *const *)a, *(char *const *)b);
}

static char *read_all(const char *path, size_t *n) {
    char *s;
    assert_int_equal(zy_read_file(path, &s, n), ZY_OK);
    return s;
}

static void test_prepare(void **state) {
    (void)state;
    char files[2][256], tokpath[256], out[256];
    tmp_path(tokpath, "tok.json");
    tmp_path(out, "data");
    make_corpus(files, tokpath);
    const char *inputs[2] = {files[0], files[1]};
    zy_prepare_opts o = prepare_defaults();
    o.tokenizer = tokpath;
    o.inputs = inputs;
    o.n_inputs = 2;
    o.out_dir = out;
    o.val_fraction = 0.2;
    o.shard_tokens = 300;
    o.doc_sep = DOCSEP_FORTUNE;
    zy_prepare_stats st;
    omp_set_num_threads(2);
    if (data_prepare(&o, &st) != ZY_OK) fail_msg("%s", zy_errmsg());
    assert_int_equal(st.docs[0] + st.docs[1], 120);
    assert_true(st.docs[1] > 5 && st.docs[1] < 50);
    assert_true(st.shards[0] > 1);

    /* the documents come back: every one once, in train or in val, as its hash says */
    zy_tokenizer *t;
    assert_int_equal(tok_load(&t, tokpath), ZY_OK);
    char **train, **val;
    size_t nt = read_split(out, "train", t, &train), nv = read_split(out, "val", t, &val);
    assert_int_equal(nt, st.docs[0]);
    assert_int_equal(nv, st.docs[1]);
    char **orig = NULL;
    size_t no = 0;
    for (int f = 0; f < 2; f++) {
        size_t n;
        char *text = read_all(files[f], &n);
        zy_spans d = {0};
        docs_split(text, n, DOCSEP_FORTUNE, &d);
        for (size_t i = 0; i < d.n; i++) {
            orig = zy_realloc(orig, (no + 1) * sizeof *orig);
            orig[no] = zy_malloc(d.d[i].len + 1);
            memcpy(orig[no], d.d[i].text, d.d[i].len);
            orig[no][d.d[i].len] = 0;
            no++;
        }
        spans_free(&d);
        free(text);
    }
    assert_int_equal(no, nt + nv);
    for (size_t i = 0; i < nv; i++) {
        assert_true(prepare_is_val(val[i], strlen(val[i]), 0.2));
        for (size_t j = 0; j < nt; j++) assert_string_not_equal(val[i], train[j]); /* disjoint */
    }
    for (size_t i = 0; i < nt; i++) assert_false(prepare_is_val(train[i], strlen(train[i]), 0.2));
    char **all = zy_malloc(no * sizeof *all);
    memcpy(all, train, nt * sizeof *all);
    memcpy(all + nt, val, nv * sizeof *all);
    qsort(all, no, sizeof *all, cmp_str);
    qsort(orig, no, sizeof *orig, cmp_str);
    for (size_t i = 0; i < no; i++) assert_string_equal(all[i], orig[i]);

    /* meta.json agrees, and the tokenizer travels with the shards */
    char meta[512];
    snprintf(meta, sizeof meta, "%s/meta.json", out);
    char *mt = read_all(meta, NULL);
    cJSON *m = cJSON_Parse(mt);
    assert_int_equal((int)cJSON_GetObjectItem(cJSON_GetObjectItem(m, "val"), "docs")->valuedouble,
                     (int)nv);
    assert_int_equal(
        cJSON_GetArraySize(cJSON_GetObjectItem(cJSON_GetObjectItem(m, "train"), "shards")),
        st.shards[0]);
    cJSON_Delete(m);
    free(mt);
    snprintf(meta, sizeof meta, "%s/tokenizer.json", out);
    assert_true(zy_path_exists(meta));

    /* deterministic: one thread instead of two, into the same folder (replaced), same bytes */
    char first[512];
    snprintf(first, sizeof first, "%s/train_000001.bin", out);
    size_t n1, n2;
    char *b1 = read_all(first, &n1);
    omp_set_num_threads(1);
    assert_int_equal(data_prepare(&o, &st), ZY_ERR); /* not without force */
    assert_non_null(strstr(zy_errmsg(), "--force"));
    o.force = 1;
    assert_int_equal(data_prepare(&o, &st), ZY_OK);
    omp_set_num_threads(2);
    char *b2 = read_all(first, &n2);
    assert_int_equal(n1, n2);
    assert_memory_equal(b1, b2, n1);
    free(b1);
    free(b2);

    for (size_t i = 0; i < nt; i++) free(train[i]);
    for (size_t i = 0; i < nv; i++) free(val[i]);
    for (size_t i = 0; i < no; i++) free(orig[i]);
    free(train);
    free(val);
    free(orig);
    free(all);
    tok_free(t);
}

static void test_prepare_bad_input(void **state) {
    (void)state;
    char files[2][256], tokpath[256], out[256], keep[256];
    tmp_path(tokpath, "tok2.json");
    make_corpus(files, tokpath);
    /* a folder that is not ours is never replaced */
    tmp_path(out, "precious");
    assert_int_equal(zy_mkdirs(out), ZY_OK);
    tmp_path(keep, "precious/notes.txt");
    write_bytes(keep, "mine", 4);
    const char *inputs[1] = {files[0]};
    zy_prepare_opts o = prepare_defaults();
    o.tokenizer = tokpath;
    o.inputs = inputs;
    o.n_inputs = 1;
    o.out_dir = out;
    o.doc_sep = DOCSEP_FORTUNE;
    o.force = 1;
    zy_prepare_stats st;
    assert_int_equal(data_prepare(&o, &st), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), out));
    assert_true(zy_path_exists(keep));
    /* a missing input: an error naming it, and no output folder */
    tmp_path(out, "never");
    o.out_dir = out;
    const char *missing[1] = {"/nonexistent/corpus.txt"};
    o.inputs = missing;
    assert_int_equal(data_prepare(&o, &st), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "/nonexistent/corpus.txt"));
    assert_false(zy_path_exists(out));
    /* a tokenizer file of the wrong kind: an error naming it, no output */
    o.inputs = inputs;
    o.tokenizer = files[1];
    assert_int_equal(data_prepare(&o, &st), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), files[1]));
    assert_false(zy_path_exists(out));
    o.tokenizer = tokpath;
    o.val_fraction = 1.5;
    assert_int_equal(data_prepare(&o, &st), ZY_ERR);
    assert_false(zy_path_exists(out));
}

/* ---- loader ---- */

enum { VOCAB = 3000 };

/* Source A: two shards, tokens in [0, 1000); source B: one shard, tokens in [1000, 2000). */
static void make_sources(char a[256], char b[256]) {
    tmp_path(a, "srcA");
    tmp_path(b, "srcB");
    assert_int_equal(zy_mkdirs(a), ZY_OK);
    assert_int_equal(zy_mkdirs(b), ZY_OK);
    zy_rng r = zy_rng_init(21, 0);
    int sizes[3] = {1001, 530, 1700};
    const char *names[3] = {"train_000000.bin", "train_000001.bin", "train_000000.bin"};
    for (int k = 0; k < 3; k++) {
        int32_t *tok = zy_malloc((size_t)sizes[k] * sizeof *tok);
        for (int i = 0; i < sizes[k]; i++)
            tok[i] = (k == 2 ? 1000 : 0) + (int)zy_rng_below(&r, 1000);
        char path[512];
        snprintf(path, sizeof path, "%s/%s", k == 2 ? b : a, names[k]);
        assert_int_equal(shard_write(path, tok, (uint64_t)sizes[k], VOCAB, 0, 1, 0), ZY_OK);
        free(tok);
    }
}

static zy_loader *open_mix(const char *a, const char *b, double wa, double wb, int B, int T,
                           uint64_t seed, int rank, int world) {
    zy_loader_source src[2] = {{a, NULL, wa}, {b, NULL, wb}};
    zy_loader_opts o = loader_defaults();
    o.B = B, o.T = T, o.seed = seed, o.rank = rank, o.world = world;
    zy_loader *l;
    if (loader_open(&l, src, 2, &o) != ZY_OK) fail_msg("%s", zy_errmsg());
    return l;
}

static void test_loader_determinism_and_resume(void **state) {
    (void)state;
    char a[256], b[256];
    make_sources(a, b);
    enum { B = 4, T = 16, STEPS = 60, K = 23 };
    zy_loader *l1 = open_mix(a, b, 1, 1, B, T, 42, 0, 1);
    zy_loader *l2 = open_mix(a, b, 1, 1, B, T, 42, 0, 1);
    zy_loader *l3 = open_mix(a, b, 1, 1, B, T, 43, 0, 1);
    int32_t *x1 = zy_malloc(STEPS * B * (T + 1) * sizeof *x1), *x2 = zy_malloc(B * (T + 1) * 4);
    int diff = 0;
    zy_loader_state saved;
    for (int s = 0; s < STEPS; s++) {
        if (s == K) loader_get_state(l1, &saved);
        int32_t *row = x1 + (size_t)s * B * (T + 1);
        loader_next(l1, row, NULL);
        loader_next(l2, x2, NULL);
        assert_memory_equal(row, x2, B * (T + 1) * sizeof *x2); /* same seed, same batches */
        loader_next(l3, x2, NULL);
        diff += memcmp(row, x2, B * (T + 1) * sizeof *x2) != 0;
    }
    assert_true(diff > STEPS / 2); /* another seed, another stream */
    /* a fresh loader restored to step K continues exactly */
    zy_loader *l4 = open_mix(a, b, 1, 1, B, T, 42, 0, 1);
    uint64_t words[ZY_LOADER_STATE_WORDS];
    memcpy(words, &saved, sizeof words); /* it travels as plain words */
    zy_loader_state back;
    memcpy(&back, words, sizeof back);
    assert_int_equal(back.step, K);
    assert_int_equal(loader_set_state(l4, &back), ZY_OK);
    for (int s = K; s < STEPS; s++) {
        loader_next(l4, x2, NULL);
        assert_memory_equal(x1 + (size_t)s * B * (T + 1), x2, B * (T + 1) * sizeof *x2);
    }
    /* a state of another seed is refused */
    assert_int_equal(loader_set_state(l3, &saved), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "seed"));
    free(x1);
    free(x2);
    loader_free(l1);
    loader_free(l2);
    loader_free(l3);
    loader_free(l4);
}

static void test_loader_mixture_and_windows(void **state) {
    (void)state;
    char a[256], b[256];
    make_sources(a, b);
    enum { B = 8, T = 10, STEPS = 2500 };
    zy_loader *l = open_mix(a, b, 1, 3, B, T, 7, 0, 1);
    zy_shard sh[3];
    for (int k = 0; k < 3; k++) {
        char path[512];
        snprintf(path, sizeof path, "%s/train_00000%d.bin", k == 2 ? b : a, k == 1);
        assert_int_equal(shard_open(&sh[k], path, 1), ZY_OK);
    }
    int32_t batch[B * (T + 1)], want[T + 1];
    zy_loader_row rows[B];
    uint64_t from_b = 0;
    for (int s = 0; s < STEPS; s++) {
        loader_next(l, batch, rows);
        for (int i = 0; i < B; i++) {
            const zy_loader_row *r = &rows[i];
            assert_true(r->source == 0 || r->source == 1);
            from_b += r->source == 1;
            const zy_shard *x = &sh[r->source == 1 ? 2 : r->shard];
            assert_true(r->source == 0 ? r->shard < 2 : r->shard == 0);
            assert_true(r->offset % T == 0);
            assert_true(r->offset + T + 1 <= x->h.ntokens); /* in range */
            shard_read(x, r->offset, T + 1, want);
            assert_memory_equal(batch + i * (T + 1), want, sizeof want);
            for (int j = 0; j <= T; j++) { /* every token from the row's own source */
                int32_t v = batch[i * (T + 1) + j];
                assert_true(r->source == 0 ? v < 1000 : v >= 1000 && v < 2000);
            }
        }
    }
    double frac = (double)from_b / (STEPS * B);
    if (frac < 0.73 || frac > 0.77) fail_msg("weights 1:3 gave %.4f from the second source", frac);
    for (int k = 0; k < 3; k++) shard_close(&sh[k]);
    loader_free(l);
}

static void test_loader_epochs(void **state) {
    (void)state;
    for (uint64_t n = 1; n < 300; n += 7) { /* the permutation is a bijection */
        uint8_t seen[300] = {0};
        for (uint64_t i = 0; i < n; i++) {
            uint64_t p = loader_permute(i, n, n * 31 + 5);
            assert_true(p < n);
            assert_int_equal(seen[p]++, 0);
        }
    }
    char a[256], b[256];
    make_sources(a, b);
    zy_loader_source src = {a, "train", 1};
    zy_loader_opts o = loader_defaults();
    o.B = 1, o.T = 20, o.seed = 3;
    zy_loader *l;
    assert_int_equal(loader_open(&l, &src, 1, &o), ZY_OK);
    uint64_t W = loader_windows(l, 0);
    assert_int_equal(W, (1001 - 1) / 20 + (530 - 1) / 20);
    int32_t row[21];
    zy_loader_row r;
    uint64_t *order = zy_malloc(2 * W * sizeof *order);
    for (uint64_t e = 0; e < 2; e++) {
        uint8_t *seen = zy_calloc(W, 1);
        for (uint64_t i = 0; i < W; i++) { /* each window exactly once per epoch */
            loader_next(l, row, &r);
            assert_int_equal(r.epoch, e);
            uint64_t w = r.shard == 0 ? r.offset / 20 : (1001 - 1) / 20 + r.offset / 20;
            assert_int_equal(seen[w]++, 0);
            order[e * W + i] = w;
        }
        free(seen);
    }
    assert_memory_not_equal(order, order + W, W * sizeof *order); /* reshuffled */
    free(order);
    loader_free(l);
    /* in order when not shuffled */
    o.shuffle = 0;
    assert_int_equal(loader_open(&l, &src, 1, &o), ZY_OK);
    for (uint64_t i = 0; i < 60; i++) {
        loader_next(l, row, &r);
        assert_int_equal(r.shard, i < 50 ? 0 : 1);
        assert_int_equal(r.offset, (i < 50 ? i : i - 50) * 20);
    }
    loader_free(l);
}

static void test_loader_ranks(void **state) {
    (void)state;
    char a[256], b[256];
    make_sources(a, b);
    enum { B = 3, T = 12 };
    zy_loader *g = open_mix(a, b, 2, 1, 2 * B, T, 11, 0, 1);
    zy_loader *r0 = open_mix(a, b, 2, 1, B, T, 11, 0, 2);
    zy_loader *r1 = open_mix(a, b, 2, 1, B, T, 11, 1, 2);
    int32_t all[2 * B * (T + 1)], part[B * (T + 1)];
    for (int s = 0; s < 40; s++) { /* the ranks' rows are the single loader's global batch */
        loader_next(g, all, NULL);
        loader_next(r0, part, NULL);
        assert_memory_equal(part, all, sizeof part);
        loader_next(r1, part, NULL);
        assert_memory_equal(part, all + B * (T + 1), sizeof part);
    }
    loader_free(g);
    loader_free(r0);
    loader_free(r1);
}

static void test_loader_errors(void **state) {
    (void)state;
    char a[256], b[256], c[256], p[512];
    make_sources(a, b);
    zy_loader_opts o = loader_defaults();
    o.T = 2000; /* longer than any shard */
    zy_loader_source src[2] = {{a, NULL, 1}, {b, NULL, 1}};
    zy_loader *l = (zy_loader *)1;
    assert_int_equal(loader_open(&l, src, 1, &o), ZY_ERR);
    assert_null(l);
    assert_non_null(strstr(zy_errmsg(), a));
    o.T = 16;
    src[1].weight = 0;
    assert_int_equal(loader_open(&l, src, 2, &o), ZY_ERR);
    src[1].weight = 1;
    src[1].split = "val"; /* no val shards there */
    assert_int_equal(loader_open(&l, src, 2, &o), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "val_*.bin"));
    /* a shard of another vocabulary */
    tmp_path(c, "srcC");
    assert_int_equal(zy_mkdirs(c), ZY_OK);
    int32_t tok[100] = {0};
    snprintf(p, sizeof p, "%s/train_000000.bin", c);
    assert_int_equal(shard_write(p, tok, 100, 70000, 0, 1, 0), ZY_OK);
    src[1].path = c;
    src[1].split = NULL;
    assert_int_equal(loader_open(&l, src, 2, &o), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "different tokenizers"));
    /* a corrupt shard is named */
    char *img;
    size_t n;
    assert_int_equal(zy_read_file(p, &img, &n), ZY_OK);
    img[100] ^= 0x40;
    write_bytes(p, img, n);
    free(img);
    assert_int_equal(loader_open(&l, src, 2, &o), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), p));
    assert_non_null(strstr(zy_errmsg(), "checksum"));
}

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/zy_data_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(tmpdir) == ZY_OK ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_shard_round_trip),
        cmocka_unit_test(test_shard_corruption),
        cmocka_unit_test(test_docs_split),
        cmocka_unit_test(test_prepare),
        cmocka_unit_test(test_prepare_bad_input),
        cmocka_unit_test(test_loader_determinism_and_resume),
        cmocka_unit_test(test_loader_mixture_and_windows),
        cmocka_unit_test(test_loader_epochs),
        cmocka_unit_test(test_loader_ranks),
        cmocka_unit_test(test_loader_errors),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
