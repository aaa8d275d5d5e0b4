/* Tests of tokenizer.json pipelines against Hugging Face `tokenizers` (fixtures from
 * scripts/make_tok_pipeline_fixtures.py): Llama 3 / cl100k-style Split + ByteLevel tokenizers and
 * Gemma 3 / Llama 2-style SentencePiece BPE (Replace/Prepend normalizers, Metaspace, byte
 * fallback, their decoders), encoded and decoded with HF's exact ids and strings; every
 * pre-tokenizer, normalizer and decoder on its own; components zayac lacks refused by name; the
 * tokenizer crash fixes (a piece with no ids, decode --ids past 32 bits). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "data/tok_internal.h"
#include "data/tokenizer.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
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

static cJSON *read_json(const char *path) {
    char *text;
    assert_int_equal(zy_read_file(path, &text, NULL), ZY_OK);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    return j;
}

static zy_tokenizer *load_ok(const char *path) {
    zy_tokenizer *t = NULL;
    if (tok_load(&t, path) != ZY_OK) fail_msg("%s", zy_errmsg());
    return t;
}

/* A tokenizer.json of one component (the rest null) and a one-token BPE model, loaded. */
static zy_tokenizer *load_component(const char *key, const cJSON *component) {
    cJSON *root = cJSON_Parse("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": "
                              "[]}}");
    cJSON_AddItemToObject(root, key, cJSON_Duplicate(component, 1));
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    assert_int_equal(zy_write_file_atomic(tmp_path("component.json"), s, strlen(s)), ZY_OK);
    free(s);
    return load_ok(tmp_path("component.json"));
}

static int ids_equal_json(const zy_ids *got, const cJSON *want) {
    if ((size_t)cJSON_GetArraySize(want) != got->n) return 0;
    size_t i = 0;
    for (const cJSON *it = want->child; it; it = it->next, i++)
        if (got->data[i] != (int32_t)it->valuedouble) return 0;
    return 1;
}

static void print_ids(const char *what, const int32_t *ids, size_t n) {
    fprintf(stderr, "  %s:", what);
    for (size_t i = 0; i < n; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* Decodes ids and compares with HF's string; returns 1 when equal. */
static int decode_matches(zy_tokenizer *t, const int32_t *ids, size_t n, int flags,
                          const char *want) {
    char *got = NULL;
    size_t len;
    assert_int_equal(tok_decode(t, ids, n, flags, &got, &len), ZY_OK);
    int ok = len == strlen(want) && memcmp(got, want, len) == 0;
    if (!ok) fprintf(stderr, "  decode: zayac '%s' HF '%s'\n", got, want);
    free(got);
    return ok;
}

/* Every text of every fixture tokenizer: encode (specials matched or not) and decode of the ids
 * (specials kept or skipped) as HF; id lists decode as HF. */
static void test_pipeline_parity(void **state) {
    (void)state;
    cJSON *all = read_json(fixture("pipeline_cases.json"));
    size_t strings = 0, tokens = 0, bad = 0;
    for (const cJSON *tj = all->child; tj; tj = tj->next) {
        zy_tokenizer *t = load_ok(fixture(tj->string));
        size_t tbad = 0, tstrings = 0;
        const cJSON *cases = cJSON_GetObjectItem(tj, "cases");
        for (const cJSON *c = cases->child; c; c = c->next, tstrings++) {
            const char *s = cJSON_GetObjectItem(c, "text")->valuestring;
            const cJSON *want_sp = cJSON_GetObjectItem(c, "special");
            zy_ids sp = {0}, plain = {0};
            assert_int_equal(tok_encode(t, s, strlen(s), TOK_SPECIAL, &sp), ZY_OK);
            assert_int_equal(tok_encode(t, s, strlen(s), 0, &plain), ZY_OK);
            int ok = ids_equal_json(&sp, want_sp) &&
                     ids_equal_json(&plain, cJSON_GetObjectItem(c, "plain"));
            if (ok)
                ok = decode_matches(t, sp.data, sp.n, 0,
                                    cJSON_GetObjectItem(c, "decoded")->valuestring) &&
                     decode_matches(t, sp.data, sp.n, TOK_SKIP_SPECIAL,
                                    cJSON_GetObjectItem(c, "decoded_skip")->valuestring);
            if (!ok) {
                fprintf(stderr, "%s: case %zu differs from HF: %s\n", tj->string, tstrings, s);
                print_ids("zayac special", sp.data, sp.n);
                print_ids("zayac plain", plain.data, plain.n);
                tbad++;
            }
            tokens += sp.n + plain.n;
            ids_free(&sp);
            ids_free(&plain);
        }
        const cJSON *id_cases = cJSON_GetObjectItem(tj, "id_cases");
        for (const cJSON *c = id_cases->child; c; c = c->next) {
            const cJSON *ids = cJSON_GetObjectItem(c, "ids");
            int32_t v[64];
            size_t n = 0;
            for (const cJSON *it = ids->child; it && n < 64; it = it->next)
                v[n++] = (int32_t)it->valuedouble;
            if (!decode_matches(t, v, n, 0, cJSON_GetObjectItem(c, "decoded")->valuestring) ||
                !decode_matches(t, v, n, TOK_SKIP_SPECIAL,
                                cJSON_GetObjectItem(c, "decoded_skip")->valuestring)) {
                print_ids("ids", v, n);
                tbad++;
            }
        }
        fprintf(stderr, "%s: %zu texts x 2 modes + %d id lists, %zu mismatches\n", tj->string,
                tstrings, cJSON_GetArraySize(id_cases), tbad);
        strings += tstrings;
        bad += tbad;
        tok_free(t);
    }
    fprintf(stderr, "parity with HF: %zu texts, %zu tokens, %zu mismatches\n", strings, tokens,
            bad);
    cJSON_Delete(all);
    assert_int_equal(bad, 0);
}

typedef struct {
    const cJSON *want; /* next expected piece */
    int bad;
} pieces_ctx;

static int check_piece(const char *piece, size_t len, void *ctx) {
    pieces_ctx *c = ctx;
    if (!c->want || strlen(c->want->valuestring) != len ||
        memcmp(c->want->valuestring, piece, len) != 0) {
        fprintf(stderr, "  piece '%.*s' where HF has '%s'\n", (int)len, piece,
                c->want ? c->want->valuestring : "(none)");
        c->bad = 1;
        return 1;
    }
    c->want = c->want->next;
    return 0;
}

/* Each pre-tokenizer (every Split behaviour, inverted or not, the regex rewrites, Metaspace,
 * ByteLevel, Sequences) and each normalizer cuts or rewrites texts as HF. */
static void test_components(void **state) {
    (void)state;
    cJSON *all = read_json(fixture("component_cases.json"));
    int n = 0, bad = 0;
    const char *kinds[2] = {"pre_tokenizers", "normalizers"};
    const char *keys[2] = {"pre_tokenizer", "normalizer"};
    for (int k = 0; k < 2; k++) {
        const cJSON *list = cJSON_GetObjectItem(all, kinds[k]);
        for (const cJSON *g = list->child; g; g = g->next) {
            zy_tokenizer *t = load_component(keys[k], cJSON_GetObjectItem(g, keys[k]));
            for (const cJSON *c = cJSON_GetObjectItem(g, "cases")->child; c; c = c->next, n++) {
                const char *text = c->child->valuestring;
                const cJSON *want = c->child->next;
                cJSON *one = NULL;
                if (k == 1) { /* a normalizer: the text is one piece (none when empty) */
                    one = cJSON_CreateArray();
                    if (want->valuestring[0])
                        cJSON_AddItemToArray(one, cJSON_CreateString(want->valuestring));
                    want = one;
                }
                pieces_ctx pc = {want->child, 0};
                int rc = tok_pieces(t, text, strlen(text), 0, check_piece, &pc);
                if (rc != ZY_OK && !pc.bad) fail_msg("%s", zy_errmsg());
                if (pc.bad || pc.want) {
                    char *cfg = cJSON_PrintUnformatted(cJSON_GetObjectItem(g, keys[k]));
                    fprintf(stderr, "%s differs from HF on '%s' (%s)\n", keys[k], text, cfg);
                    free(cfg);
                    bad++;
                }
                cJSON_Delete(one);
            }
            tok_free(t);
        }
    }
    const cJSON *decs = cJSON_GetObjectItem(all, "decoders");
    for (const cJSON *g = decs->child; g; g = g->next) {
        zy_tokenizer *t = load_component("decoder", cJSON_GetObjectItem(g, "decoder"));
        for (const cJSON *c = cJSON_GetObjectItem(g, "cases")->child; c; c = c->next, n++) {
            const char *toks[16];
            size_t lens[16], m = 0;
            for (const cJSON *it = c->child->child; it && m < 16; it = it->next, m++) {
                toks[m] = it->valuestring;
                lens[m] = strlen(toks[m]);
            }
            char *got;
            size_t len;
            assert_int_equal(tok_decode_tokens(t, toks, lens, m, &got, &len), ZY_OK);
            const char *want = c->child->next->valuestring;
            if (len != strlen(want) || memcmp(got, want, len) != 0) {
                fprintf(stderr, "decoder differs from HF: zayac '%s' HF '%s'\n", got, want);
                bad++;
            }
            free(got);
        }
        tok_free(t);
    }
    fprintf(stderr, "components: %d cases, %d differ from HF\n", n, bad);
    cJSON_Delete(all);
    assert_int_equal(bad, 0);
}

/* A loaded file is saved back byte for byte and encodes the same after reloading. */
static void test_save_keeps_file(void **state) {
    (void)state;
    zy_tokenizer *t = load_ok(fixture("gemma3_style.json"));
    assert_int_equal(tok_save(t, tmp_path("saved.json")), ZY_OK);
    char *a, *b;
    size_t na, nb;
    assert_int_equal(zy_read_file(fixture("gemma3_style.json"), &a, &na), ZY_OK);
    assert_int_equal(zy_read_file(tmp_path("saved.json"), &b, &nb), ZY_OK);
    assert_int_equal(na, nb);
    assert_memory_equal(a, b, na);
    free(a);
    free(b);
    tok_free(t);
}

/* Special ids by name, and the description of the components. */
static void test_specials_and_describe(void **state) {
    (void)state;
    zy_tokenizer *t = load_ok(fixture("gemma3_style.json"));
    assert_int_equal(tok_bos_id(t), 2);
    assert_int_equal(tok_eos_id(t), 1);
    assert_int_equal(tok_pad_id(t), 0);
    char d[512];
    tok_describe(t, d, sizeof d);
    assert_non_null(strstr(d, "normalizer Replace"));
    assert_non_null(strstr(d, "byte_fallback"));
    assert_non_null(strstr(d, "decoder Replace, ByteFallback, Fuse"));
    assert_non_null(strstr(d, "TemplateProcessing (not applied"));
    tok_free(t);
    t = load_ok(fixture("llama3_style.json"));
    assert_int_equal(tok_bos_id(t), tok_token_id(t, "<|begin_of_text|>"));
    assert_int_equal(tok_eos_id(t), tok_token_id(t, "<|end_of_text|>"));
    tok_describe(t, d, sizeof d);
    assert_non_null(strstr(d, "pre-tokenizer Split, ByteLevel"));
    tok_free(t);
}

static void expect_load_error(const char *name, const char *content, const char *phrase) {
    const char *path = tmp_path(name);
    assert_int_equal(zy_write_file_atomic(path, content, strlen(content)), ZY_OK);
    zy_tokenizer *t = (zy_tokenizer *)1;
    assert_int_equal(tok_load(&t, path), ZY_ERR);
    assert_null(t);
    const char *msg = zy_errmsg();
    if (!strstr(msg, path) || !strstr(msg, phrase))
        fail_msg("error for %s should name the file and say '%s': %s", name, phrase, msg);
}

/* A component zayac does not implement is an error naming it, never ignored. */
static void test_unsupported_components(void **state) {
    (void)state;
    const char *model = "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}";
    struct {
        const char *part, *phrase;
    } cases[] = {
        {"\"normalizer\": {\"type\": \"NFC\"}", "normalizer \"NFC\""},
        {"\"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"Lowercase\"}]}",
         "normalizer \"Lowercase\""},
        {"\"pre_tokenizer\": {\"type\": \"Whitespace\"}", "pre_tokenizer \"Whitespace\""},
        {"\"pre_tokenizer\": {\"type\": \"Sequence\", \"pretokenizers\": [{\"type\": "
         "\"Digits\", \"individual_digits\": true}]}",
         "pre_tokenizer \"Digits\""},
        {"\"decoder\": {\"type\": \"WordPiece\"}", "decoder \"WordPiece\""},
        {"\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\w+\"}, "
         "\"behavior\": \"Isolated\", \"invert\": false}",
         "\\w"},
        {"\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"[a[b]]\"}, "
         "\"behavior\": \"Isolated\", \"invert\": false}",
         "a class inside a class"},
        {"\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(\"}, "
         "\"behavior\": \"Isolated\", \"invert\": false}",
         "pattern"},
        {"\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"a\"}, "
         "\"behavior\": \"Sideways\", \"invert\": false}",
         "behavior"},
        {"\"pre_tokenizer\": {\"type\": \"Metaspace\", \"replacement\": \"ab\"}", "one character"},
        {"\"decoder\": {\"type\": \"Strip\", \"content\": \" \", \"start\": -1, \"stop\": 0}",
         "start"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        char buf[1024], name[32];
        snprintf(buf, sizeof buf, "{%s, %s}", cases[i].part, model);
        snprintf(name, sizeof name, "unsupported%zu.json", i);
        expect_load_error(name, buf, cases[i].phrase);
    }
    expect_load_error("subword.json",
                      "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": [], "
                      "\"continuing_subword_prefix\": \"##\"}}",
                      "continuing_subword_prefix");
}

/* A piece whose bytes are all unknown (no unk token) encodes to no ids, also from the word cache
 * (once a memcpy from NULL); an unk_token missing from the vocabulary is an error when needed. */
static void test_piece_without_ids(void **state) {
    (void)state;
    const char *json = "{\"pre_tokenizer\": {\"type\": \"ByteLevel\", \"add_prefix_space\": false},"
                       " \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}";
    assert_int_equal(zy_write_file_atomic(tmp_path("tiny.json"), json, strlen(json)), ZY_OK);
    zy_tokenizer *t = load_ok(tmp_path("tiny.json"));
    zy_ids ids = {0};
    const char *text = "bbb bbb bbb a";
    assert_int_equal(tok_encode(t, text, strlen(text), 0, &ids), ZY_OK);
    assert_int_equal(ids.n, 1); /* only "a" */
    ids_free(&ids);
    assert_int_equal(tok_encode(t, "zz", 2, 0, &ids), ZY_OK);
    assert_int_equal(ids.n, 0);
    assert_null(ids.data);
    ids_free(&ids);
    tok_free(t);

    json = "{\"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"vocab\": {\"a\": 0}, "
           "\"merges\": []}}";
    assert_int_equal(zy_write_file_atomic(tmp_path("nounk.json"), json, strlen(json)), ZY_OK);
    t = load_ok(tmp_path("nounk.json"));
    assert_int_equal(tok_encode(t, "aa", 2, 0, &ids), ZY_OK);
    assert_int_equal(ids.n, 2);
    assert_int_equal(tok_encode(t, "ab", 2, 0, &ids), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "<unk>"));
    ids_free(&ids);
    tok_free(t);
}

/* Bytes that are not UTF-8 round-trip through byte fallback (HF would print U+FFFD). */
static void test_byte_fallback_round_trip(void **state) {
    (void)state;
    zy_tokenizer *t = load_ok(fixture("gemma3_style.json"));
    const char text[] = "ok \xff\xfe bad \xe6\x97 cut \xf0\x9f\x99\x82 fine";
    zy_ids ids = {0};
    assert_int_equal(tok_encode(t, text, sizeof text - 1, 0, &ids), ZY_OK);
    char *out;
    size_t n;
    assert_int_equal(tok_decode(t, ids.data, ids.n, 0, &out, &n), ZY_OK);
    assert_int_equal(n, sizeof text - 1);
    assert_memory_equal(out, text, n);
    free(out);
    ids_free(&ids);
    tok_free(t);
}

static int run(const char *cmd) {
    int rc = system(cmd);
    if (rc == -1) fail_msg("system(%s) failed", cmd);
    return WIFEXITED(rc) ? WEXITSTATUS(rc) : -1;
}

/* The command line: encode, decode and info with a Gemma-style file; bad ids and unsupported
 * components exit 2. */
static void test_cli(void **state) {
    (void)state;
    const char *bin = getenv("ZAYAC_BIN");
    if (!bin) skip();
    char cmd[16384], ids[256], out[256];
    snprintf(ids, sizeof ids, "%s", tmp_path("ids.txt"));
    snprintf(out, sizeof out, "%s", tmp_path("text.txt"));
    snprintf(cmd, sizeof cmd,
             "%s tokenizer encode --tokenizer %s --text 'hello world' > %s && "
             "%s tokenizer decode --tokenizer %s --input %s > %s",
             bin, fixture("gemma3_style.json"), ids, bin, fixture("gemma3_style.json"), ids, out);
    assert_int_equal(run(cmd), 0);
    char *text;
    assert_int_equal(zy_read_file(tmp_path("text.txt"), &text, NULL), ZY_OK);
    assert_string_equal(text, "hello world");
    free(text);
    snprintf(cmd, sizeof cmd, "%s tokenizer info --tokenizer %s > %s", bin,
             fixture("llama2_style.json"), tmp_path("info.txt"));
    assert_int_equal(run(cmd), 0);
    assert_int_equal(zy_read_file(tmp_path("info.txt"), &text, NULL), ZY_OK);
    assert_non_null(strstr(text, "normalizer Prepend, Replace; pre-tokenizer none"));
    free(text);
    const char *bad_ids[] = {"4294967297", "-1", "2147483648", "99999999999999999999", "1e3"};
    for (size_t i = 0; i < sizeof bad_ids / sizeof *bad_ids; i++) {
        snprintf(cmd, sizeof cmd, "%s tokenizer decode --tokenizer %s --ids '%s' 2>/dev/null", bin,
                 fixture("gemma3_style.json"), bad_ids[i]);
        assert_int_equal(run(cmd), 2);
    }
    const char *nfc = "{\"normalizer\": {\"type\": \"NFC\"}, \"model\": {\"type\": \"BPE\", "
                      "\"vocab\": {\"a\": 0}, \"merges\": []}}";
    assert_int_equal(zy_write_file_atomic(tmp_path("nfc.json"), nfc, strlen(nfc)), ZY_OK);
    snprintf(out, sizeof out, "%s", tmp_path("err.txt"));
    snprintf(cmd, sizeof cmd, "%s tokenizer encode --tokenizer %s --text a 2>%s", bin,
             tmp_path("nfc.json"), out);
    assert_int_equal(run(cmd), 2);
    assert_int_equal(zy_read_file(tmp_path("err.txt"), &text, NULL), ZY_OK);
    assert_non_null(strstr(text, "NFC"));
    free(text);
}

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/zy_tokhf_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(tmpdir) == ZY_OK ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_pipeline_parity),
        cmocka_unit_test(test_components),
        cmocka_unit_test(test_save_keeps_file),
        cmocka_unit_test(test_specials_and_describe),
        cmocka_unit_test(test_unsupported_components),
        cmocka_unit_test(test_piece_without_ids),
        cmocka_unit_test(test_byte_fallback_round_trip),
        cmocka_unit_test(test_cli),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
