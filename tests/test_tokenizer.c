/* Tests of the byte-level BPE tokenizer: ids identical to Hugging Face `tokenizers` on a GPT-2
 * style tokenizer.json that HF trained (fixtures from scripts/make_tok_fixtures.py), round trips
 * on any bytes, training against a direct re-count reference, save/load, and bad files. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/rng.h"
#include "data/tok_internal.h"
#include "data/tokenizer.h"

#include <cjson/cJSON.h>
#include <omp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmpdir[64];

static const char *fixture(const char *name) {
    static char path[4096];
    const char *root = getenv("ZAYAC_ROOT");
    snprintf(path, sizeof path, "%s/tests/fixtures/tok/%s", root ? root : ".", name);
    return path;
}

static const char *tmp_path(const char *name) {
    static char path[256];
    snprintf(path, sizeof path, "%s/%s", tmpdir, name);
    return path;
}

static void write_text(const char *path, const char *text) {
    assert_int_equal(zy_write_file_atomic(path, text, strlen(text)), ZY_OK);
}

static zy_tokenizer *load_ok(const char *path) {
    zy_tokenizer *t = NULL;
    if (tok_load(&t, path) != ZY_OK) fail_msg("%s", zy_errmsg());
    return t;
}

static int ids_equal_json(const zy_ids *got, const cJSON *want) {
    if ((size_t)cJSON_GetArraySize(want) != got->n) return 0;
    size_t i = 0;
    for (const cJSON *it = want->child; it; it = it->next, i++)
        if (got->data[i] != (int32_t)it->valuedouble) return 0;
    return 1;
}

static void print_ids(const char *what, const zy_ids *v) {
    fprintf(stderr, "%s:", what);
    for (size_t i = 0; i < v->n; i++) fprintf(stderr, " %d", v->data[i]);
    fprintf(stderr, "\n");
}

/* Checks one mode of every fixture case: encode with flags and compare with HF's ids. */
static void check_cases(zy_tokenizer *t, const char *field, int flags) {
    char *text;
    assert_int_equal(zy_read_file(fixture("hf_cases.json"), &text, NULL), ZY_OK);
    cJSON *cases = cJSON_Parse(text);
    free(text);
    assert_non_null(cases);
    int n = 0, bad = 0;
    for (const cJSON *c = cases->child; c; c = c->next, n++) {
        const char *s = cJSON_GetObjectItem(c, "text")->valuestring;
        zy_ids got = {0};
        assert_int_equal(tok_encode(t, s, strlen(s), flags, &got), ZY_OK);
        if (!ids_equal_json(&got, cJSON_GetObjectItem(c, field))) {
            fprintf(stderr, "case %d (%s) differs from HF: %s\n", n, field, s);
            print_ids("zayac", &got);
            bad++;
        }
        ids_free(&got);
    }
    cJSON_Delete(cases);
    assert_true(n >= 50);
    assert_int_equal(bad, 0);
}

static void test_bytelevel_table(void **state) {
    (void)state;
    /* GPT-2's table: printable bytes stand for themselves, the rest are shifted past 255 */
    assert_int_equal(bytelevel_char('A'), 'A');
    assert_int_equal(bytelevel_char(' '), 0x120);  /* "Ġ" */
    assert_int_equal(bytelevel_char('\n'), 0x10A); /* "Ċ" */
    assert_int_equal(bytelevel_char(0), 0x100);
    assert_int_equal(bytelevel_char(0xAD), 0x143);
    int seen[512] = {0};
    for (int b = 0; b < 256; b++) {
        uint32_t c = bytelevel_char((uint8_t)b);
        assert_true(c < 512);
        assert_int_equal(seen[c]++, 0); /* one character per byte */
        assert_int_equal(bytelevel_byte(c), b);
    }
    assert_int_equal(bytelevel_byte(' '), -1);
    assert_int_equal(bytelevel_byte(0x144), -1);
}

static void test_hf_parity_special(void **state) {
    (void)state;
    zy_tokenizer *t = load_ok(fixture("hf_gpt2_style.json"));
    check_cases(t, "special", TOK_SPECIAL);
    tok_free(t);
}

static void test_hf_parity_plain(void **state) {
    (void)state;
    zy_tokenizer *t = load_ok(fixture("hf_gpt2_style.json"));
    check_cases(t, "plain", 0);
    tok_free(t);
}

/* The same tokenizer with add_prefix_space = true, made by editing the JSON as HF would read it. */
static void test_hf_parity_prefix_space(void **state) {
    (void)state;
    char *text;
    assert_int_equal(zy_read_file(fixture("hf_gpt2_style.json"), &text, NULL), ZY_OK);
    cJSON *j = cJSON_Parse(text);
    free(text);
    cJSON *pre = cJSON_GetObjectItem(j, "pre_tokenizer");
    cJSON_ReplaceItemInObject(pre, "add_prefix_space", cJSON_CreateTrue());
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    write_text(tmp_path("prefix.json"), s);
    free(s);
    zy_tokenizer *t = load_ok(tmp_path("prefix.json"));
    check_cases(t, "prefix", TOK_SPECIAL);
    tok_free(t);
}

/* The older merges form, "left right" strings, reads the same. */
static void test_hf_legacy_merges(void **state) {
    (void)state;
    char *text;
    assert_int_equal(zy_read_file(fixture("hf_gpt2_style.json"), &text, NULL), ZY_OK);
    cJSON *j = cJSON_Parse(text);
    free(text);
    cJSON *merges = cJSON_GetObjectItem(cJSON_GetObjectItem(j, "model"), "merges"), *legacy;
    legacy = cJSON_CreateArray();
    for (const cJSON *m = merges->child; m; m = m->next) {
        char pair[256];
        snprintf(pair, sizeof pair, "%s %s", m->child->valuestring, m->child->next->valuestring);
        cJSON_AddItemToArray(legacy, cJSON_CreateString(pair));
    }
    cJSON_ReplaceItemInObject(cJSON_GetObjectItem(j, "model"), "merges", legacy);
    char *s = cJSON_PrintUnformatted(j);
    cJSON_Delete(j);
    write_text(tmp_path("legacy.json"), s);
    free(s);
    zy_tokenizer *t = load_ok(tmp_path("legacy.json"));
    check_cases(t, "special", TOK_SPECIAL);
    tok_free(t);
}

static void test_hf_special_ids(void **state) {
    (void)state;
    zy_tokenizer *t = load_ok(fixture("hf_gpt2_style.json"));
    int32_t eot = tok_token_id(t, "<|endoftext|>");
    assert_true(eot >= 0);
    assert_int_equal(tok_eos_id(t), eot);
    assert_int_equal(tok_bos_id(t), eot); /* no bos of its own: eos stands in */
    assert_int_equal(tok_pad_id(t), eot);
    assert_true(tok_is_special(t, eot));
    assert_false(tok_is_special(t, tok_token_id(t, "[NEW]")));
    tok_free(t);
}

static void round_trip(zy_tokenizer *t, const char *s, size_t n) {
    zy_ids ids = {0};
    assert_int_equal(tok_encode(t, s, n, 0, &ids), ZY_OK);
    char *back;
    size_t bn;
    assert_int_equal(tok_decode(t, ids.data, ids.n, 0, &back, &bn), ZY_OK);
    if (bn != n || memcmp(back, s, n) != 0) fail_msg("round trip changed %zu bytes of text", n);
    free(back);
    ids_free(&ids);
}

static const char *const RT_TEXTS[] = {
    "plain ascii text, with punctuation!",
    "Ünïcödé façade — Привет, мир! 日本語 한국어 مرحبا",
    "emoji 🙂😀👍🏽 👨‍👩‍👧‍👦 🇫🇷",
    "   runs\t\t\tof\n\n\n   whitespace  \r\n\u00a0\u3000 \u180e  ",
    "invalid bytes \xff\xfe here, a lone \xc3 lead, \xed\xa0\x80 surrogate, \xc0\xaf overlong, "
    "\xf0\x9f\x98 cut, \x80\x80 continuations",
    "\xff",
    "<|endoftext|> looks like a special token but is text here",
    "",
};

static void test_round_trip(void **state) {
    (void)state;
    zy_tokenizer *hf = load_ok(fixture("hf_gpt2_style.json"));
    zy_bpe_trainer *tr = bpe_trainer_new();
    for (size_t i = 0; i < sizeof RT_TEXTS / sizeof *RT_TEXTS; i++)
        assert_int_equal(bpe_trainer_add(tr, RT_TEXTS[i], strlen(RT_TEXTS[i])), ZY_OK);
    zy_tokenizer *ours;
    assert_int_equal(bpe_trainer_finish(tr, 400, NULL, 0, 1, &ours), ZY_OK);
    bpe_trainer_free(tr);
    zy_tokenizer *ts[2] = {hf, ours};
    for (int k = 0; k < 2; k++) {
        for (size_t i = 0; i < sizeof RT_TEXTS / sizeof *RT_TEXTS; i++)
            round_trip(ts[k], RT_TEXTS[i], strlen(RT_TEXTS[i]));
        zy_rng r = zy_rng_init(7, (uint64_t)k);
        char buf[300];
        for (int i = 0; i < 300; i++) { /* random bytes, biased to UTF-8-ish and spaces */
            size_t n = zy_rng_below(&r, sizeof buf);
            for (size_t j = 0; j < n; j++) {
                uint64_t x = zy_rng_u64(&r);
                buf[j] = (char)((x & 3) == 0 ? ' ' : (x & 3) == 1 ? 'a' + (x >> 8) % 26 : x >> 16);
            }
            round_trip(ts[k], buf, n);
        }
    }
    /* special tokens decode to their text, or vanish when skipped */
    int32_t eot = tok_token_id(hf, "<|endoftext|>"), ids[2] = {eot, tok_token_id(hf, "a")};
    char *s;
    size_t n;
    assert_int_equal(tok_decode(hf, ids, 2, 0, &s, &n), ZY_OK);
    assert_string_equal(s, "<|endoftext|>a");
    free(s);
    assert_int_equal(tok_decode(hf, ids, 2, TOK_SKIP_SPECIAL, &s, &n), ZY_OK);
    assert_string_equal(s, "a");
    free(s);
    tok_free(hf);
    tok_free(ours);
}

static void test_long_pieces(void **state) {
    (void)state;
    zy_tokenizer *t = load_ok(fixture("hf_gpt2_style.json"));
    size_t n = 200000;
    char *s = zy_malloc(n + 1);
    const char fill[] = {' ', 'a', '\n', '!'};
    for (int k = 0; k < 4; k++) {
        memset(s, fill[k], n);
        round_trip(t, s, n);
    }
    free(s);
    tok_free(t);
}

/* The parallel path (cut at line starts) gives the ids of one sequential pass. */
static void test_parallel_encode(void **state) {
    (void)state;
    zy_tokenizer *t = load_ok(fixture("hf_gpt2_style.json"));
    size_t cap = 3u << 20, n = 0;
    char *s = zy_malloc(cap);
    zy_rng r = zy_rng_init(3, 0);
    while (n + 400 < cap) {
        const char *piece = RT_TEXTS[zy_rng_below(&r, 4)];
        size_t l = strlen(piece);
        memcpy(s + n, piece, l);
        n += l;
        s[n++] = "\n \t."[zy_rng_below(&r, 4)];
    }
    omp_set_num_threads(2);
    zy_ids par = {0}, seq = {0};
    assert_int_equal(tok_encode(t, s, n, 0, &par), ZY_OK);
    tok_encoder *e = tok_encoder_new(t);
    assert_int_equal(tok_encoder_encode(e, s, n, 0, &seq), ZY_OK);
    tok_encoder_free(e);
    assert_int_equal(par.n, seq.n);
    assert_memory_equal(par.data, seq.data, par.n * sizeof(int32_t));
    ids_free(&par);
    ids_free(&seq);
    free(s);
    tok_free(t);
}

/* ---- training: the incremental trainer against a direct re-count every step ---- */

typedef struct {
    int32_t *sym;
    int32_t len;
    int64_t count;
} ref_word;

typedef struct {
    ref_word *w;
    int n, cap;
} ref_words;

static int ref_add_piece(const char *p, size_t n, void *ctx) {
    ref_words *ws = ctx;
    for (int i = 0; i < ws->n; i++)
        if ((size_t)ws->w[i].len == n) {
            int same = 1;
            for (size_t j = 0; j < n && same; j++) same = ws->w[i].sym[j] == 3 + (uint8_t)p[j];
            if (same) {
                ws->w[i].count++;
                return 0;
            }
        }
    if (ws->n == ws->cap) {
        ws->cap = ws->cap ? 2 * ws->cap : 64;
        ws->w = realloc(ws->w, (size_t)ws->cap * sizeof *ws->w);
    }
    ref_word *w = &ws->w[ws->n++];
    w->sym = malloc(n * sizeof *w->sym);
    for (size_t j = 0; j < n; j++) w->sym[j] = 3 + (uint8_t)p[j];
    w->len = (int32_t)n;
    w->count = 1;
    return 0;
}

static void test_train_matches_recount(void **state) {
    (void)state;
    /* a corpus of pseudo-words with a skewed distribution */
    static const char *const parts[] = {"th", "e", "an", "d",  "ing", "qu", "x", "ab", "ba", "a",
                                        "b",  "é", "ß",  "日", "  ",  "\n", ".", "'s", "1",  "23"};
    size_t cap = 20000, n = 0;
    char *text = zy_malloc(cap);
    zy_rng r = zy_rng_init(11, 0);
    while (n + 16 < cap) {
        if (zy_rng_below(&r, 3) == 0) text[n++] = ' ';
        int k = (int)(zy_rng_below(&r, 20) * zy_rng_below(&r, 20) / 20); /* skewed */
        size_t l = strlen(parts[k]);
        memcpy(text + n, parts[k], l);
        n += l;
    }
    int32_t vocab = 3 + 256 + 150;
    zy_bpe_trainer *tr = bpe_trainer_new();
    assert_int_equal(bpe_trainer_add(tr, text, n), ZY_OK);
    zy_tokenizer *t;
    assert_int_equal(bpe_trainer_finish(tr, vocab, NULL, 0, 2, &t), ZY_OK);
    bpe_trainer_free(tr);

    /* reference: pre-tokenize the same way, then recount every pair before every merge */
    ref_words ws = {0};
    zy_pretok p;
    zy_pretok_matcher m;
    assert_int_equal(pretok_init(&p, NULL), ZY_OK);
    pretok_matcher_init(&m);
    assert_int_equal(pretok_split(&p, &m, text, n, ref_add_piece, &ws), ZY_OK);
    pretok_matcher_free(&m);
    pretok_free(&p);
    int32_t next_id = 3 + 256, nm = 0;
    int64_t *count = zy_malloc((size_t)vocab * vocab * sizeof *count); /* [vocab, vocab] */
    uint8_t *banned = zy_calloc((size_t)vocab * vocab, 1);
    while (next_id < vocab) {
        memset(count, 0, (size_t)vocab * vocab * sizeof *count);
        for (int i = 0; i < ws.n; i++)
            for (int32_t j = 0; j + 1 < ws.w[i].len; j++)
                count[ws.w[i].sym[j] * vocab + ws.w[i].sym[j + 1]] += ws.w[i].count;
        int64_t best = 0;
        int32_t ba = 0, bb = 0;
        for (int32_t a = 0; a < vocab; a++) /* ties: the smallest (a, b) */
            for (int32_t b = 0; b < vocab; b++)
                if (!banned[a * vocab + b] && count[a * vocab + b] > best) {
                    best = count[a * vocab + b];
                    ba = a;
                    bb = b;
                }
        if (best < 2) break;
        assert_true(nm < t->n_merges);
        assert_int_equal(t->merges[nm][0], ba);
        assert_int_equal(t->merges[nm][1], bb);
        int32_t x = t->merges[nm][2];
        char joined[256];
        snprintf(joined, sizeof joined, "%s%s", t->text[ba], t->text[bb]);
        assert_string_equal(t->text[x], joined);
        if (x == next_id) next_id++;
        banned[ba * vocab + bb] = 1;
        nm++;
        for (int i = 0; i < ws.n; i++) { /* merge left to right */
            int32_t *q = ws.w[i].sym, k = 0;
            for (int32_t j = 0; j < ws.w[i].len; k++) {
                if (j + 1 < ws.w[i].len && q[j] == ba && q[j + 1] == bb) {
                    q[k] = x;
                    j += 2;
                } else {
                    q[k] = q[j++];
                }
            }
            ws.w[i].len = k;
        }
    }
    free(count);
    free(banned);
    assert_int_equal(nm, t->n_merges);
    assert_int_equal(tok_vocab_size(t), next_id);
    /* defaults: bos, eos, pad first */
    assert_int_equal(tok_bos_id(t), 0);
    assert_int_equal(tok_eos_id(t), 1);
    assert_int_equal(tok_pad_id(t), 2);
    assert_string_equal(tok_token_text(t, 1), "<|eos|>");
    round_trip(t, text, n);
    for (int i = 0; i < ws.n; i++) free(ws.w[i].sym);
    free(ws.w);
    free(text);
    tok_free(t);
}

/* Saving and loading keeps the ids; an HF file saved by zayac encodes the same. */
static void test_save_load(void **state) {
    (void)state;
    zy_tokenizer *hf = load_ok(fixture("hf_gpt2_style.json"));
    assert_int_equal(tok_save(hf, tmp_path("resaved.json")), ZY_OK);
    zy_tokenizer *again = load_ok(tmp_path("resaved.json"));
    assert_int_equal(tok_vocab_size(again), tok_vocab_size(hf));
    assert_int_equal(tok_n_merges(again), tok_n_merges(hf));
    check_cases(again, "special", TOK_SPECIAL);
    check_cases(again, "plain", 0);
    tok_free(again);

    const char *const sp[] = {"<|endoftext|>", "<|pad|>"};
    zy_bpe_trainer *tr = bpe_trainer_new();
    for (size_t i = 0; i < sizeof RT_TEXTS / sizeof *RT_TEXTS; i++)
        assert_int_equal(bpe_trainer_add(tr, RT_TEXTS[i], strlen(RT_TEXTS[i])), ZY_OK);
    zy_tokenizer *t;
    assert_int_equal(bpe_trainer_finish(tr, 330, sp, 2, 1, &t), ZY_OK);
    bpe_trainer_free(tr);
    assert_int_equal(tok_eos_id(t), 0);
    assert_int_equal(tok_pad_id(t), 1);
    assert_int_equal(tok_save(t, tmp_path("ours.json")), ZY_OK);
    assert_int_equal(tok_save_hf_config(t, tmp_path("tokenizer_config.json"), 0), ZY_OK);
    zy_tokenizer *l = load_ok(tmp_path("ours.json"));
    assert_int_equal(tok_vocab_size(l), tok_vocab_size(t));
    for (size_t i = 0; i < sizeof RT_TEXTS / sizeof *RT_TEXTS; i++) {
        zy_ids a = {0}, b = {0};
        const char *s = RT_TEXTS[i];
        assert_int_equal(tok_encode(t, s, strlen(s), TOK_SPECIAL, &a), ZY_OK);
        assert_int_equal(tok_encode(l, s, strlen(s), TOK_SPECIAL, &b), ZY_OK);
        assert_int_equal(a.n, b.n);
        if (a.n) assert_memory_equal(a.data, b.data, a.n * sizeof(int32_t));
        ids_free(&a);
        ids_free(&b);
    }
    tok_free(l);
    tok_free(t);
    tok_free(hf);
}

/* ---- bad input ---- */

static void expect_load_error(const char *name, const char *content, const char *phrase) {
    const char *path = tmp_path(name);
    if (content) write_text(path, content);
    zy_tokenizer *t = (zy_tokenizer *)1;
    assert_int_equal(tok_load(&t, path), ZY_ERR);
    assert_null(t);
    const char *msg = zy_errmsg();
    if (!strstr(msg, path) || !strstr(msg, phrase))
        fail_msg("error for %s should name the file and say '%s': %s", name, phrase, msg);
}

static void test_bad_files(void **state) {
    (void)state;
    expect_load_error("wordpiece.json",
                      "{\"model\": {\"type\": \"WordPiece\", \"unk_token\": \"[UNK]\", "
                      "\"vocab\": {\"[UNK]\": 0, \"a\": 1}}, \"pre_tokenizer\": {\"type\": "
                      "\"BertPreTokenizer\"}}",
                      "WordPiece");
    expect_load_error("unigram.json",
                      "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", -1.0]]}, "
                      "\"pre_tokenizer\": {\"type\": \"Metaspace\"}}",
                      "Unigram");
    expect_load_error("malformed.json", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,",
                      "not valid JSON");
    expect_load_error("empty.json", "", "not valid JSON");
    expect_load_error("array.json", "[1, 2, 3]", "JSON object");
    const char *head = "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false},"
                       " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}";
    char buf[1024];
    snprintf(buf, sizeof buf, "%s}}", head);
    expect_load_error("nomerges.json", buf, "merges");
    snprintf(buf, sizeof buf, "%s, \"merges\": [\"a z\"]}}", head);
    expect_load_error("badmerge.json", buf, "not in model.vocab");
    snprintf(buf, sizeof buf, "%s, \"merges\": [\"b b\"]}}", head);
    expect_load_error("badmerged.json", buf, "merged token");
    snprintf(buf, sizeof buf, "%s, \"merges\": [\"a b c\"]}}", head);
    expect_load_error("badmergeform.json", buf, "merges[0]");
    snprintf(buf, sizeof buf, "%s, \"merges\": [], \"dropout\": 0.1}}", head);
    expect_load_error("dropout.json", buf, "dropout");
    expect_load_error("badid.json",
                      "{\"pre_tokenizer\": {\"type\": \"ByteLevel\"}, \"model\": {\"type\": "
                      "\"BPE\", \"vocab\": {\"a\": \"zero\"}, \"merges\": []}}",
                      "non-negative integer");
    expect_load_error("metaspace.json",
                      "{\"pre_tokenizer\": {\"type\": \"Metaspace\"}, \"model\": {\"type\": "
                      "\"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
                      "pre_tokenizer");
    expect_load_error("normalizer.json",
                      "{\"normalizer\": {\"type\": \"NFC\"}, \"pre_tokenizer\": {\"type\": "
                      "\"ByteLevel\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, "
                      "\"merges\": []}}",
                      "normalizer");
    expect_load_error("missing-file.json", NULL, "cannot open");

    /* the HF file cut anywhere: one error naming it, never a crash */
    char *full;
    size_t n;
    assert_int_equal(zy_read_file(fixture("hf_gpt2_style.json"), &full, &n), ZY_OK);
    for (int k = 1; k < 40; k++) {
        size_t cut = n * (size_t)k / 40;
        assert_int_equal(zy_write_file_atomic(tmp_path("cut.json"), full, cut), ZY_OK);
        zy_tokenizer *t = NULL;
        assert_int_equal(tok_load(&t, tmp_path("cut.json")), ZY_ERR);
        assert_null(t);
        assert_non_null(strstr(zy_errmsg(), tmp_path("cut.json")));
    }
    free(full);

    /* decode refuses ids outside the vocabulary */
    zy_tokenizer *t = load_ok(fixture("hf_gpt2_style.json"));
    int32_t ids[2] = {5, 1 << 20};
    char *s = NULL;
    assert_int_equal(tok_decode(t, ids, 2, 0, &s, NULL), ZY_ERR);
    assert_null(s);
    assert_non_null(strstr(zy_errmsg(), "not in the vocabulary"));
    tok_free(t);
    /* training refuses a vocabulary too small for the bytes */
    zy_bpe_trainer *tr = bpe_trainer_new();
    assert_int_equal(bpe_trainer_finish(tr, 100, NULL, 0, 2, &t), ZY_ERR);
    assert_null(t);
    bpe_trainer_free(tr);
}

/* The command line: train on a file, the result loads and round-trips. */
static void test_cli_train(void **state) {
    (void)state;
    const char *bin = getenv("ZAYAC_BIN");
    if (!bin) skip();
    char corpus[256], out[256];
    snprintf(corpus, sizeof corpus, "%s", tmp_path("corpus.txt"));
    snprintf(out, sizeof out, "%s", tmp_path("cli.json"));
    write_text(corpus, "first entry\nwith two lines\n%\nsecond entry's text\n%\nthird one 123\n");
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "%s tokenizer train --input %s %s --vocab-size 270 --out %s --doc-sep fortune "
             "--special '<|endoftext|>' --special '<|pad|>' --min-frequency 1 > /dev/null",
             bin, corpus, corpus, out);
    assert_int_equal(system(cmd), 0);
    zy_tokenizer *t = load_ok(out);
    assert_int_equal(tok_vocab_size(t), 270);
    assert_int_equal(tok_eos_id(t), 0);
    round_trip(t, "second entry's text", 19);
    tok_free(t);
    snprintf(cmd, sizeof cmd, "%s tokenizer train --input %s --vocab-size 300 2>/dev/null", bin,
             corpus);
    assert_int_not_equal(system(cmd), 0); /* --out is required */
}

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/zy_tok_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(tmpdir) == ZY_OK ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bytelevel_table),  cmocka_unit_test(test_hf_parity_special),
        cmocka_unit_test(test_hf_parity_plain),  cmocka_unit_test(test_hf_parity_prefix_space),
        cmocka_unit_test(test_hf_legacy_merges), cmocka_unit_test(test_hf_special_ids),
        cmocka_unit_test(test_round_trip),       cmocka_unit_test(test_long_pieces),
        cmocka_unit_test(test_parallel_encode),  cmocka_unit_test(test_train_matches_recount),
        cmocka_unit_test(test_save_load),        cmocka_unit_test(test_bad_files),
        cmocka_unit_test(test_cli_train),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
