/* Tests of the zayac model commands as other tools script them: the built binary ($ZAYAC_BIN) runs
 * in a child process (posix_spawn) on the fixtures under $ZAYAC_ROOT and on files written to a
 * temporary folder. Checked: `info` parameter counts against the formulas of the spec computed here
 * from config.json, `init` + `logits` on the tiny preset (loss recomputed from the written logits),
 * `logits` and `generate` against the transformers fixtures, and bad input: every case exits 2
 * (README "Exit statuses"; test_cli_exit.c covers every command), not by a signal or a sanitizer
 * report, with one error line naming the option or file, and writes no output file. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "io/npy.h"
#include "io/safetensors.h"
#include "model/config.h"

#include <cjson/cJSON.h>
#include <fcntl.h>
#include <math.h>
#include "spawn_util.h"
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#define SAN_EXIT 99 /* exit code of a sanitizer report in the child (set in setup) */

static char tmp[64];      /* this test's temporary folder */
static const char *bin;   /* the zayac binary */
static char root[512];    /* the repository (fixtures) */
static char small_a[600]; /* tests/fixtures/hf/small_a */

/* Runs zayac with args (NULL-terminated, without argv[0]); captures stdout and stderr. */
static run_result run_args(const char *const *args) {
    run_result r = spawn_capture(bin, tmp, args);
    if (r.code == -1000) fail_msg("cannot run %s: %s", bin, r.err);
    return r;
}

#define RUN(...) run_args((const char *const[]){__VA_ARGS__, NULL})

static void print_args(const char *const *args) {
    fprintf(stderr, "command: zayac");
    for (; *args; args++) fprintf(stderr, " %s", *args);
    fprintf(stderr, "\n");
}

static void expect_ok(run_result *r, const char *what) {
    if (r->code != 0) fail_msg("%s: exit %d, stderr:\n%s", what, r->code, r->err);
}

static int sanitizer_report(const char *err) {
    return strstr(err, "Sanitizer") || strstr(err, "runtime error") || strstr(err, "LeakSanitizer");
}

/* Runs a command that must fail cleanly as bad input: exit 2, a first stderr line "zayac CMD: ..."
 * holding `needle` (and `needle2` when given), any other lines from the usage text, and no file
 * at `no_file` afterwards. */
static void expect_fail_args(const char *const *args, const char *needle, const char *needle2,
                             const char *no_file) {
    run_result r = run_args(args);
    char prefix[64];
    snprintf(prefix, sizeof prefix, "zayac %s: ", args[0]);
    const char *nl = strchr(r.err, '\n');
    size_t first_len = nl ? (size_t)(nl - r.err) : strlen(r.err);
    char *first = strndup(r.err, first_len);
    int bad = r.code != 2;
    bad |= sanitizer_report(r.err);
    bad |= strncmp(first, prefix, strlen(prefix)) != 0;
    bad |= !strstr(first, needle) || (needle2 && !strstr(first, needle2));
    for (const char *p = nl; p && p[1]; p = strchr(p + 1, '\n')) /* only usage lines follow */
        bad |= strncmp(p + 1, "usage: ", 7) != 0 && strncmp(p + 1, "  ", 2) != 0;
    if (no_file && zy_path_exists(no_file)) bad = 1;
    if (bad) {
        print_args(args);
        fail_msg("expected a clean failure naming '%s'%s%s%s; exit %d, output file %s, stderr:\n%s",
                 needle, needle2 ? " and '" : "", needle2 ? needle2 : "", needle2 ? "'" : "",
                 r.code, no_file && zy_path_exists(no_file) ? "written" : "absent", r.err);
    }
    free(first);
    result_free(&r);
}

#define EXPECT_FAIL(needle, needle2, no_file, ...)                                                 \
    expect_fail_args((const char *const[]){__VA_ARGS__, NULL}, needle, needle2, no_file)

static void tmp_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", tmp, name);
}

static void fixture(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", small_a, name);
}

static void copy_file(const char *src, const char *dst, size_t max_bytes) {
    char *data;
    size_t len;
    if (zy_read_file(src, &data, &len) != ZY_OK) fail_msg("%s", zy_errmsg());
    assert_int_equal(zy_write_file_atomic(dst, data, len < max_bytes ? len : max_bytes), ZY_OK);
    free(data);
}

static long long json_int(const cJSON *c, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(c, key);
    if (!cJSON_IsNumber(v)) fail_msg("config has no number %s", key);
    return (long long)v->valuedouble;
}

typedef struct {
    long long total, embedding, active_no_embed;
} counts;

/* The spec's parameter list ("Parameter names and shapes"), summed from a config.json file. The
 * balancing biases are a buffer, not a trained parameter; layer 0 has no router_states_scale. */
static counts spec_counts(const char *config_path) {
    char *text;
    if (zy_read_file(config_path, &text, NULL) != ZY_OK) fail_msg("%s", zy_errmsg());
    cJSON *c = cJSON_Parse(text);
    free(text);
    assert_non_null(c);
    const long long V = json_int(c, "vocab_size"), D = json_int(c, "hidden_size");
    const long long L = json_int(c, "num_hidden_layers"), Hq = json_int(c, "num_attention_heads");
    const long long Hk = json_int(c, "num_key_value_heads"), d = json_int(c, "head_dim");
    const long long E = json_int(c, "num_experts"), F = json_int(c, "moe_intermediate_size");
    const long long R = json_int(c, "router_hidden_size"), t0 = json_int(c, "cca_time0");
    const long long t1 = json_int(c, "cca_time1");
    cJSON_Delete(c);
    const long long C = (Hq + Hk) * d;
    long long attn = Hq * d * D + Hk * d * D       /* q_proj, k_proj */
                     + 2 * (Hk * d / 2) * D        /* v_proj_current, v_proj_delayed */
                     + C * t0 + C + C * d * t1 + C /* the two convolutions with biases */
                     + Hk                          /* qk_norm.temp */
                     + D * Hq * d;                 /* o_proj */
    long long norms = 2 * D + 8 * D;               /* two layernorms, two residual scalings */
    long long router = R * D + R + R               /* down_proj, router_mlp.norm */
                       + 2 * (R * R + R)           /* fc1, fc2 */
                       + (E + 1) * R;              /* out_proj */
    long long expert = 2 * F * D + D * F;          /* one expert's gate_up_proj and down_proj */
    long long per_layer = attn + norms + router + E * expert;
    counts k;
    k.embedding = V * D;
    k.total = k.embedding + 3 * D + L * per_layer + (L - 1) * R; /* + router_states_scale */
    k.active_no_embed = k.total - k.embedding - L * (E - 1) * expert;
    return k;
}

/* The integer printed on the `info` line that starts with label. */
static long long info_value(const char *out, const char *label) {
    const char *p = strstr(out, label);
    if (!p) fail_msg("info output has no line '%s':\n%s", label, out);
    long long v;
    if (sscanf(p + strlen(label), "%lld", &v) != 1) fail_msg("no number after '%s'", label);
    return v;
}

static void expect_info_counts(run_result *r, counts k) {
    assert_int_equal(info_value(r->out, "  total "), k.total);
    assert_int_equal(info_value(r->out, "  embedding (tied head) "), k.embedding);
    assert_int_equal(info_value(r->out, "  total without embedding "), k.total - k.embedding);
    assert_int_equal(info_value(r->out, "  active per token, no emb. "), k.active_no_embed);
}

static void test_info_counts(void **state) {
    (void)state;
    char path[1200];
    snprintf(path, sizeof path, "%s/configs/zaya1-base.json", root);
    counts k = spec_counts(path);
    /* the paper's numbers: 8.84B in total, 8.30B without the embedding, about 754M active */
    assert_true(fabs(k.total / 1e9 - 8.84) < 0.005);
    assert_true(fabs((k.total - k.embedding) / 1e9 - 8.30) < 0.005);
    assert_true(fabs(k.active_no_embed / 1e6 - 754) < 1.0);
    run_result r = RUN("info", "--preset", "zaya1-base");
    expect_ok(&r, "info --preset zaya1-base");
    expect_info_counts(&r, k);
    assert_non_null(strstr(r.out, "(8.84"));
    result_free(&r);

    fixture(path, sizeof path, "config.json"); /* another shape: a model folder */
    k = spec_counts(path);
    r = RUN("info", "--model", small_a);
    expect_ok(&r, "info --model small_a");
    expect_info_counts(&r, k);
    result_free(&r);

    r = RUN("info", "--preset", "zaya1-base", "--json"); /* --json is config.json as written */
    expect_ok(&r, "info --json");
    cJSON *j = cJSON_Parse(r.out);
    assert_non_null(j);
    assert_int_equal(json_int(j, "vocab_size"), 262272);
    assert_int_equal(json_int(j, "num_hidden_layers"), 40);
    cJSON_Delete(j);
    result_free(&r);
}

/* Mean next-token cross-entropy of logits [B,T,V] (fp64 log-softmax) against ids [B,T]. */
static double ref_loss(const float *logits, const int32_t *ids, int B, int T, int V) {
    double sum = 0;
    for (int b = 0; b < B; b++)
        for (int t = 0; t + 1 < T; t++) {
            const float *z = logits + ((size_t)b * T + t) * V;
            double mx = z[0], s = 0;
            for (int v = 1; v < V; v++) mx = z[v] > mx ? z[v] : mx;
            for (int v = 0; v < V; v++) s += exp(z[v] - mx);
            sum += mx + log(s) - z[ids[b * T + t + 1]];
        }
    return sum / (B * (T - 1));
}

static double printed_loss(const char *out) {
    const char *p = strstr(out, "mean next-token cross-entropy: ");
    if (!p) fail_msg("no loss line in:\n%s", out);
    double loss;
    int n;
    if (sscanf(p + 31, "%lf over %d tokens", &loss, &n) != 2) fail_msg("bad loss line: %s", p);
    return loss;
}

static void test_init_then_logits(void **state) {
    (void)state;
    char dir[256], dir2[256], tokens[256], logits[256];
    tmp_path(dir, sizeof dir, "tiny_model");
    tmp_path(dir2, sizeof dir2, "tiny_model_again");
    run_result r = RUN("init", "--preset", "tiny", "--out", dir, "--seed", "3");
    expect_ok(&r, "init --preset tiny");
    result_free(&r);
    r = RUN("init", "--preset", "tiny", "--out", dir2, "--seed", "3");
    expect_ok(&r, "init --preset tiny again");
    result_free(&r);
    char a[1200], b[1200]; /* the same seed gives the same weights */
    snprintf(a, sizeof a, "%s/model.safetensors", dir);
    snprintf(b, sizeof b, "%s/model.safetensors", dir2);
    char *x, *y;
    size_t nx, ny;
    assert_int_equal(zy_read_file(a, &x, &nx), ZY_OK);
    assert_int_equal(zy_read_file(b, &y, &ny), ZY_OK);
    assert_true(nx == ny && memcmp(x, y, nx) == 0);
    free(x);
    free(y);

    char cfg_path[1200]; /* V from the config init wrote */
    snprintf(cfg_path, sizeof cfg_path, "%s/config.json", dir);
    char *text;
    assert_int_equal(zy_read_file(cfg_path, &text, NULL), ZY_OK);
    cJSON *c = cJSON_Parse(text);
    free(text);
    assert_non_null(c);
    const int V = (int)json_int(c, "vocab_size");
    cJSON_Delete(c);

    enum { B = 2, T = 9 };
    int32_t ids[B * T];
    for (int i = 0; i < B * T; i++) ids[i] = (int32_t)((i * 2654435761u) % (unsigned)V);
    ids[0] = 0;
    ids[B * T - 1] = V - 1;
    tmp_path(tokens, sizeof tokens, "tiny_tokens.npy");
    tmp_path(logits, sizeof logits, "tiny_logits.npy");
    const int64_t shape[2] = {B, T};
    assert_int_equal(npy_write_i32(tokens, 2, shape, ids), ZY_OK);
    r = RUN("logits", "--model", dir, "--tokens", tokens, "--out", logits);
    expect_ok(&r, "logits on the tiny model");
    zy_npy out;
    if (npy_read_as(&out, logits, ZY_NPY_F32) != ZY_OK) fail_msg("%s", zy_errmsg());
    assert_int_equal(out.ndim, 3);
    assert_int_equal(out.shape[0], B);
    assert_int_equal(out.shape[1], T);
    assert_int_equal(out.shape[2], V);
    const float *z = out.data;
    for (size_t i = 0; i < out.numel; i++)
        if (!isfinite(z[i])) fail_msg("logit %zu is %g", i, z[i]);
    double loss = printed_loss(r.out), want = ref_loss(z, ids, B, T, V);
    assert_true(isfinite(loss));
    if (fabs(loss - want) > 1e-5 * want)
        fail_msg("printed loss %.6f, from the logits %.6f", loss, want);
    /* fresh weights (std 0.02) give nearly uniform predictions: loss close to ln V */
    if (fabs(loss - log(V)) > 0.5) fail_msg("loss %.4f is far from ln V = %.4f", loss, log(V));
    npy_free(&out);
    result_free(&r);
}

/* JSON file at dir/name, parsed (fails the test when absent or broken). */
static cJSON *read_json(const char *dir, const char *name) {
    char path[1200], *text;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (zy_read_file(path, &text, NULL) != ZY_OK) fail_msg("%s", zy_errmsg());
    cJSON *j = cJSON_Parse(text);
    free(text);
    if (!j) fail_msg("%s: not JSON", path);
    return j;
}

/* Every tensor of an exported folder, read back through the safetensors files the index names (or
 * model.safetensors): dtype BF16/F32 as asked (balancing biases F32 always) and values equal to
 * the source's rounded to that dtype. Returns the number of tensors. */
static int check_exported_tensors(const char *src, const char *dir, int bf16, int sharded) {
    char path[1200], sp[1200];
    snprintf(sp, sizeof sp, "%s/model.safetensors", src);
    zy_safetensors s;
    assert_int_equal(safetensors_open(&s, sp), ZY_OK);
    cJSON *index = NULL;
    if (sharded) {
        index = read_json(dir, "model.safetensors.index.json");
        snprintf(path, sizeof path, "%s/model.safetensors", dir);
        assert_false(zy_path_exists(path)); /* a single file would win over the index in HF */
    }
    for (int i = 0; i < s.count; i++) {
        const zy_st_tensor *x = &s.tensors[i];
        const char *file = "model.safetensors";
        if (index) {
            cJSON *f = cJSON_GetObjectItem(cJSON_GetObjectItem(index, "weight_map"), x->name);
            assert_non_null(f);
            file = f->valuestring;
        }
        snprintf(path, sizeof path, "%s/%s", dir, file);
        zy_safetensors e;
        assert_int_equal(safetensors_open(&e, path), ZY_OK);
        int k = safetensors_find(&e, x->name);
        assert_true(k >= 0);
        int is_bias = strstr(x->name, "balancing_biases") != NULL;
        assert_int_equal(e.tensors[k].dtype, bf16 && !is_bias ? ZY_ST_BF16 : ZY_ST_F32);
        size_t n = 1;
        for (int d = 0; d < x->ndim; d++) n *= (size_t)x->shape[d];
        float *a = malloc(n * sizeof *a), *b = malloc(n * sizeof *b);
        assert_int_equal(safetensors_read_f32(&s, x->name, x->ndim, x->shape, a), ZY_OK);
        assert_int_equal(safetensors_read_f32(&e, x->name, x->ndim, x->shape, b), ZY_OK);
        for (size_t j = 0; j < n; j++) {
            float want = bf16 && !is_bias ? zy_bf16_to_f32(zy_f32_to_bf16(a[j])) : a[j];
            if (want != b[j]) fail_msg("%s[%zu]: exported %g, expected %g", x->name, j, b[j], want);
        }
        free(a);
        free(b);
        safetensors_close(&e);
    }
    int count = s.count;
    safetensors_close(&s);
    cJSON_Delete(index);
    return count;
}

/* zayac export on a checkpoint zayac trained: bf16 sharded and fp32 single-file folders with the
 * weights only, configs and tokenizer; zayac loads them back with the same logits (fp32) or the
 * logits of the bf16-rounded weights. Bad options fail cleanly and write nothing. */
static void test_export(void **state) {
    (void)state;
    char src[1024], bf[1024], fp[1024], path[1200];
    snprintf(src, sizeof src, "%s/tests/fixtures/trained/cpu", root);
    tmp_path(bf, sizeof bf, "export_bf16");
    tmp_path(fp, sizeof fp, "export_fp32");
    run_result r = RUN("export", "--model", src, "--out", bf, "--shard-size", "300KB");
    expect_ok(&r, "export bf16");
    assert_non_null(strstr(r.out, "3 weight files"));
    result_free(&r);
    r = RUN("export", "--model", src, "--out", fp, "--dtype", "fp32");
    expect_ok(&r, "export fp32");
    result_free(&r);
    assert_int_equal(check_exported_tensors(src, bf, 1, 1), check_exported_tensors(src, fp, 0, 0));
    const char *files[] = {"config.json", "generation_config.json", "tokenizer.json",
                           "tokenizer_config.json"};
    for (int i = 0; i < 4; i++) {
        snprintf(path, sizeof path, "%s/%s", bf, files[i]);
        assert_true(zy_path_exists(path));
    }
    const char *absent[] = {"train_state.safetensors", "state.json", "manifest.json"};
    for (int i = 0; i < 3; i++) {
        snprintf(path, sizeof path, "%s/%s", bf, absent[i]);
        assert_false(zy_path_exists(path));
    }
    zy_config c;
    assert_int_equal(config_load(&c, bf), ZY_OK);
    assert_string_equal(c.dtype, "bfloat16");
    cJSON *g = read_json(bf, "generation_config.json"), *t = read_json(bf, "tokenizer_config.json");
    assert_int_equal(cJSON_GetObjectItem(g, "bos_token_id")->valueint, c.bos_token_id);
    assert_int_equal(cJSON_GetObjectItem(g, "eos_token_id")->valueint, c.eos_token_ids[0]);
    assert_int_equal(cJSON_GetObjectItem(g, "pad_token_id")->valueint, c.pad_token_id);
    assert_int_equal(cJSON_GetObjectItem(g, "max_length")->valueint, c.max_position_embeddings);
    assert_int_equal(cJSON_GetObjectItem(t, "model_max_length")->valueint,
                     c.max_position_embeddings);
    assert_string_equal(cJSON_GetObjectItem(t, "eos_token")->valuestring, "<|eos|>");
    cJSON_Delete(g);
    cJSON_Delete(t);
    /* zayac reads both back: fp32 gives the source's logits bit for bit */
    char tokens[1200], l0[1200], l1[1200], l2[1200];
    snprintf(tokens, sizeof tokens, "%s/tokens.npy", src);
    tmp_path(l0, sizeof l0, "ex_l0.npy");
    tmp_path(l1, sizeof l1, "ex_l1.npy");
    tmp_path(l2, sizeof l2, "ex_l2.npy");
    const char *dirs[3] = {src, fp, bf}, *outs[3] = {l0, l1, l2};
    for (int i = 0; i < 3; i++) {
        r = RUN("logits", "--model", dirs[i], "--tokens", tokens, "--out", outs[i]);
        expect_ok(&r, "logits on an export");
        result_free(&r);
    }
    zy_npy a, b, h;
    assert_int_equal(npy_read_as(&a, l0, ZY_NPY_F32), ZY_OK);
    assert_int_equal(npy_read_as(&b, l1, ZY_NPY_F32), ZY_OK);
    assert_int_equal(npy_read_as(&h, l2, ZY_NPY_F32), ZY_OK);
    assert_memory_equal(a.data, b.data, a.numel * sizeof(float));
    double maxd = 0, maxr = 0;
    for (size_t i = 0; i < a.numel; i++) {
        maxd = fmax(maxd, fabs(((float *)a.data)[i] - ((float *)h.data)[i]));
        maxr = fmax(maxr, fabs(((float *)a.data)[i]));
    }
    assert_true(maxd > 0 && maxd < 0.1 * maxr); /* bf16 weights: close, not equal */
    npy_free(&a);
    npy_free(&b);
    npy_free(&h);
    /* bad options and an occupied --out: clean errors, nothing written or replaced */
    tmp_path(path, sizeof path, "export_bad");
    EXPECT_FAIL("--shard-size", "5XB", path, "export", "--model", src, "--out", path,
                "--shard-size", "5XB");
    EXPECT_FAIL("--dtype", "fp16", path, "export", "--model", src, "--out", path, "--dtype",
                "fp16");
    EXPECT_FAIL("not empty", NULL, NULL, "export", "--model", src, "--out", fp);
    assert_int_equal(config_load(&c, fp), ZY_OK);
    assert_string_equal(c.dtype, "float32");
}

static void test_logits_matches_transformers(void **state) {
    (void)state;
    char tokens[1024], ref_path[1024], out_path[1024], ref_json[1024];
    fixture(tokens, sizeof tokens, "tokens.npy");
    fixture(ref_path, sizeof ref_path, "logits.npy");
    fixture(ref_json, sizeof ref_json, "reference.json");
    tmp_path(out_path, sizeof out_path, "small_a_logits.npy");
    run_result r = RUN("logits", "--model", small_a, "--tokens", tokens, "--out", out_path);
    expect_ok(&r, "logits on small_a");
    zy_npy got, ref;
    assert_int_equal(npy_read_as(&got, out_path, ZY_NPY_F32), ZY_OK);
    assert_int_equal(npy_read_as(&ref, ref_path, ZY_NPY_F32), ZY_OK);
    assert_int_equal(got.ndim, 3);
    assert_memory_equal(got.shape, ref.shape, 3 * sizeof(int64_t));
    const float *g = got.data, *f = ref.data;
    double maxref = 0, maxerr = 0;
    for (size_t i = 0; i < ref.numel; i++) {
        maxref = fmax(maxref, fabs(f[i]));
        maxerr = fmax(maxerr, fabs((double)g[i] - f[i]));
    }
    if (maxerr > 1e-4 * maxref) fail_msg("logits differ by %g (largest logit %g)", maxerr, maxref);
    char *text; /* the printed loss against transformers' loss */
    assert_int_equal(zy_read_file(ref_json, &text, NULL), ZY_OK);
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    double want = cJSON_GetObjectItem(j, "loss")->valuedouble, loss = printed_loss(r.out);
    cJSON_Delete(j);
    if (fabs(loss - want) > 1e-5) fail_msg("loss %.7f, transformers %.7f", loss, want);
    npy_free(&got);
    npy_free(&ref);
    result_free(&r);
}

/* Copies small_a with eos_token_id = [unused id, stop] into tmp/name; returns the folder. */
static void eos_list_model(char *dir, size_t n, const char *name, int unused, int stop) {
    tmp_path(dir, n, name);
    assert_int_equal(zy_mkdirs(dir), ZY_OK);
    char src[1024], dst[1200], *text;
    size_t len;
    snprintf(src, sizeof src, "%s/model.safetensors", small_a);
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    assert_int_equal(zy_read_file(src, &text, &len), ZY_OK);
    assert_int_equal(zy_write_file_atomic(dst, text, len), ZY_OK);
    free(text);
    snprintf(src, sizeof src, "%s/config.json", small_a);
    assert_int_equal(zy_read_file(src, &text, NULL), ZY_OK);
    cJSON *j = cJSON_Parse(text);
    free(text);
    cJSON *ids = cJSON_CreateArray();
    cJSON_AddItemToArray(ids, cJSON_CreateNumber(unused));
    cJSON_AddItemToArray(ids, cJSON_CreateNumber(stop));
    cJSON_ReplaceItemInObject(j, "eos_token_id", ids);
    text = cJSON_Print(j);
    cJSON_Delete(j);
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    assert_int_equal(zy_write_file_atomic(dst, text, strlen(text)), ZY_OK);
    free(text);
}

/* eos_token_id as a list: every id ends greedy generation (here the second, a token HF's greedy
 * continuation reaches), the list survives zayac's config round trip, and --ignore-eos runs on. */
static void test_generate_stops_at_any_eos(void **state) {
    (void)state;
    char prompt[1024], greedy[1024], out_path[1024], dir[1024];
    fixture(prompt, sizeof prompt, "prompt.npy");
    fixture(greedy, sizeof greedy, "greedy.npy");
    zy_npy p, want, got;
    assert_int_equal(npy_read_as(&p, prompt, ZY_NPY_I32), ZY_OK);
    assert_int_equal(npy_read_as(&want, greedy, ZY_NPY_I32), ZY_OK);
    const int32_t *w = want.data;
    const int T0 = (int)p.shape[1], total = (int)want.shape[1];
    const int stop = w[T0 + 3];
    int first = T0; /* the first generated position holding the stop token */
    while (w[first] != stop) first++;
    int unused = 0; /* an id nowhere in the generation: listed first, it must not matter */
    for (int i = 0; i < total; i++)
        if (w[i] == unused) unused++, i = -1;
    eos_list_model(dir, sizeof dir, "eos_list", unused, stop);
    tmp_path(out_path, sizeof out_path, "eos_greedy.npy");
    run_result r = RUN("generate", "--model", dir, "--prompt-tokens", prompt, "--max-new", "8",
                       "--greedy", "--out", out_path);
    expect_ok(&r, "generate with an eos list");
    result_free(&r);
    assert_int_equal(npy_read_as(&got, out_path, ZY_NPY_I32), ZY_OK);
    assert_int_equal(got.shape[1], first + 1);
    assert_memory_equal(got.data, w, (size_t)(first + 1) * sizeof(int32_t));
    npy_free(&got);
    r = RUN("generate", "--model", dir, "--prompt-tokens", prompt, "--max-new", "8", "--greedy",
            "--ignore-eos", "--out", out_path);
    expect_ok(&r, "generate --ignore-eos");
    result_free(&r);
    assert_int_equal(npy_read_as(&got, out_path, ZY_NPY_I32), ZY_OK);
    assert_int_equal(got.shape[1], total);
    npy_free(&got);
    zy_config c;
    assert_int_equal(config_load(&c, dir), ZY_OK);
    assert_int_equal(c.n_eos, 2);
    assert_true(config_is_eos(&c, unused) && config_is_eos(&c, stop));
    npy_free(&p);
    npy_free(&want);
}

static void test_generate_matches_transformers(void **state) {
    (void)state;
    char prompt[1024], greedy[1024], out_path[1024];
    fixture(prompt, sizeof prompt, "prompt.npy");
    fixture(greedy, sizeof greedy, "greedy.npy");
    tmp_path(out_path, sizeof out_path, "small_a_greedy.npy");
    zy_npy p, want, got;
    assert_int_equal(npy_read_as(&p, prompt, ZY_NPY_I32), ZY_OK);
    assert_int_equal(npy_read_as(&want, greedy, ZY_NPY_I32), ZY_OK);
    char max_new[16];
    snprintf(max_new, sizeof max_new, "%lld", (long long)(want.shape[1] - p.shape[1]));
    assert_string_equal(max_new, "8");
    run_result r = RUN("generate", "--model", small_a, "--prompt-tokens", prompt, "--max-new",
                       max_new, "--greedy", "--out", out_path);
    expect_ok(&r, "generate on small_a");
    assert_int_equal(npy_read_as(&got, out_path, ZY_NPY_I32), ZY_OK);
    assert_int_equal(got.ndim, 2);
    assert_int_equal(got.shape[0], 1);
    assert_int_equal(got.shape[1], want.shape[1]);
    assert_memory_equal(got.data, want.data, want.numel * sizeof(int32_t));
    char line[256] = ""; /* stdout: the new tokens */
    const int32_t *w = want.data;
    for (int64_t i = p.shape[1]; i < want.shape[1]; i++) {
        size_t at = strlen(line);
        snprintf(line + at, sizeof line - at, "%d%s", w[i], i + 1 < want.shape[1] ? " " : "\n");
    }
    assert_string_equal(r.out, line);
    npy_free(&p);
    npy_free(&want);
    npy_free(&got);
    result_free(&r);
}

/* A copy of small_a under tmp/name with config.json and model.safetensors cut to the given sizes.
 */
static void broken_model(char *dir, size_t n, const char *name, size_t config_bytes,
                         size_t model_bytes) {
    tmp_path(dir, n, name);
    assert_int_equal(zy_mkdirs(dir), ZY_OK);
    char src[1024], dst[1200];
    fixture(src, sizeof src, "config.json");
    snprintf(dst, sizeof dst, "%s/config.json", dir);
    copy_file(src, dst, config_bytes);
    fixture(src, sizeof src, "model.safetensors");
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    copy_file(src, dst, model_bytes);
}

static void test_bad_input(void **state) {
    (void)state;
    char tokens[1024], prompt[1024], out[256], path[512], dir[256];
    fixture(tokens, sizeof tokens, "tokens.npy");
    fixture(prompt, sizeof prompt, "prompt.npy");
    tmp_path(out, sizeof out, "never_written.npy");
    const char *M = small_a;

    /* options */
    EXPECT_FAIL("--bogus", NULL, out, "logits", "--model", M, "--tokens", tokens, "--out", out,
                "--bogus");
    EXPECT_FAIL("--tokens", NULL, out, "logits", "--model", M, "--out", out);
    EXPECT_FAIL("--model", NULL, out, "logits", "--tokens", tokens, "--out", out, "--model");
    EXPECT_FAIL("--prompt-tokens", NULL, out, "generate", "--model", M, "--out", out);
    EXPECT_FAIL("--frobnicate", NULL, NULL, "info", "--frobnicate");
    EXPECT_FAIL("--out", NULL, NULL, "init", "--preset", "tiny");
    EXPECT_FAIL("stray", NULL, out, "logits", "--model", M, "--tokens", tokens, "--out", out,
                "stray");
    EXPECT_FAIL("no-such-preset", NULL, NULL, "info", "--preset", "no-such-preset");

    /* token files */
    int32_t ids[12] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12};
    const int64_t s1[1] = {12}, s2[2] = {2, 6}, s3[3] = {1, 2, 6}, s0[2] = {0, 6};
    tmp_path(path, sizeof path, "rank1.npy");
    assert_int_equal(npy_write_i32(path, 1, s1, ids), ZY_OK);
    EXPECT_FAIL(path, "[12]", out, "logits", "--model", M, "--tokens", path, "--out", out);
    EXPECT_FAIL(path, "[12]", out, "generate", "--model", M, "--prompt-tokens", path, "--out", out);
    tmp_path(path, sizeof path, "rank3.npy");
    assert_int_equal(npy_write_i32(path, 3, s3, ids), ZY_OK);
    EXPECT_FAIL(path, "[1, 2, 6]", out, "logits", "--model", M, "--tokens", path, "--out", out);
    tmp_path(path, sizeof path, "empty.npy");
    assert_int_equal(npy_write_i32(path, 2, s0, ids), ZY_OK);
    EXPECT_FAIL(path, NULL, out, "logits", "--model", M, "--tokens", path, "--out", out);
    EXPECT_FAIL(path, NULL, out, "generate", "--model", M, "--prompt-tokens", path, "--out", out);
    tmp_path(path, sizeof path, "batch2_prompt.npy");
    assert_int_equal(npy_write_i32(path, 2, s2, ids), ZY_OK);
    EXPECT_FAIL(path, "[2, 6]", out, "generate", "--model", M, "--prompt-tokens", path, "--out",
                out);
    ids[7] = 97; /* small_a has V = 97 */
    tmp_path(path, sizeof path, "oov_high.npy");
    assert_int_equal(npy_write_i32(path, 2, s2, ids), ZY_OK);
    EXPECT_FAIL(path, "97", out, "logits", "--model", M, "--tokens", path, "--out", out);
    ids[7] = -1;
    tmp_path(path, sizeof path, "oov_negative.npy");
    assert_int_equal(npy_write_i32(path, 2, s2, ids), ZY_OK);
    EXPECT_FAIL(path, "-1", out, "logits", "--model", M, "--tokens", path, "--out", out);
    const int64_t sp[2] = {1, 6};
    ids[3] = 1000;
    tmp_path(path, sizeof path, "oov_prompt.npy");
    assert_int_equal(npy_write_i32(path, 2, sp, ids), ZY_OK);
    EXPECT_FAIL(path, "1000", out, "generate", "--model", M, "--prompt-tokens", path, "--max-new",
                "2", "--greedy", "--out", out);
    float fl[12] = {0};
    tmp_path(path, sizeof path, "float_tokens.npy");
    assert_int_equal(npy_write_f32(path, 2, s2, fl), ZY_OK);
    EXPECT_FAIL(path, NULL, out, "logits", "--model", M, "--tokens", path, "--out", out);
    EXPECT_FAIL(path, NULL, out, "generate", "--model", M, "--prompt-tokens", path, "--out", out);
    tmp_path(path, sizeof path, "not_npy.npy");
    assert_int_equal(zy_write_file_atomic(path, "hello", 5), ZY_OK);
    EXPECT_FAIL(path, NULL, out, "logits", "--model", M, "--tokens", path, "--out", out);
    tmp_path(path, sizeof path, "no_such_tokens.npy");
    EXPECT_FAIL(path, NULL, out, "logits", "--model", M, "--tokens", path, "--out", out);

    /* model folders */
    tmp_path(dir, sizeof dir, "no_such_model");
    EXPECT_FAIL(dir, NULL, out, "logits", "--model", dir, "--tokens", tokens, "--out", out);
    EXPECT_FAIL(dir, NULL, out, "generate", "--model", dir, "--prompt-tokens", prompt, "--out",
                out);
    EXPECT_FAIL(dir, NULL, NULL, "info", "--model", dir);
    broken_model(dir, sizeof dir, "bad_config", 200, (size_t)-1);
    EXPECT_FAIL("config.json", dir, out, "logits", "--model", dir, "--tokens", tokens, "--out",
                out);
    EXPECT_FAIL("config.json", dir, NULL, "info", "--model", dir);
    broken_model(dir, sizeof dir, "truncated_weights", (size_t)-1, 5000);
    EXPECT_FAIL("model.safetensors", dir, out, "logits", "--model", dir, "--tokens", tokens,
                "--out", out);
    EXPECT_FAIL("model.safetensors", dir, out, "generate", "--model", dir, "--prompt-tokens",
                prompt, "--out", out);
    broken_model(dir, sizeof dir, "short_header", (size_t)-1, 6);
    EXPECT_FAIL("model.safetensors", dir, out, "logits", "--model", dir, "--tokens", tokens,
                "--out", out);
    broken_model(dir, sizeof dir, "no_weights", (size_t)-1, 0);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    assert_int_equal(unlink(path), 0);
    EXPECT_FAIL(dir, NULL, out, "logits", "--model", dir, "--tokens", tokens, "--out", out);

    /* an output that cannot be written */
    tmp_path(path, sizeof path, "no_such_dir/out.npy");
    EXPECT_FAIL(path, NULL, path, "logits", "--model", M, "--tokens", tokens, "--out", path);
    EXPECT_FAIL(path, NULL, path, "generate", "--model", M, "--prompt-tokens", prompt, "--out",
                path);

    /* option values */
    tmp_path(dir, sizeof dir, "never_created");
    EXPECT_FAIL("--dtype", "f64", dir, "init", "--preset", "tiny", "--out", dir, "--dtype", "f64");
    EXPECT_FAIL("--seed", "x1", dir, "init", "--preset", "tiny", "--out", dir, "--seed", "x1");
    const char *bad_max_new[] = {"abc", "-3", "1.5", "", "99999999999999999999"};
    for (size_t i = 0; i < sizeof bad_max_new / sizeof *bad_max_new; i++)
        EXPECT_FAIL("--max-new", NULL, out, "generate", "--model", M, "--prompt-tokens", prompt,
                    "--max-new", bad_max_new[i], "--out", out);
    /* more tokens than the model's positions (small_a: 256) */
    EXPECT_FAIL("--max-new", "256", out, "generate", "--model", M, "--prompt-tokens", prompt,
                "--max-new", "300", "--greedy", "--out", out);
    const char *bad_temperature[] = {"0", "-1", "nan", "warm", "inf"};
    for (size_t i = 0; i < sizeof bad_temperature / sizeof *bad_temperature; i++)
        EXPECT_FAIL("--temperature", NULL, out, "generate", "--model", M, "--prompt-tokens", prompt,
                    "--temperature", bad_temperature[i], "--out", out);
    EXPECT_FAIL("--top-p", NULL, out, "generate", "--model", M, "--prompt-tokens", prompt,
                "--top-p", "1.5", "--out", out);
    EXPECT_FAIL("--top-p", NULL, out, "generate", "--model", M, "--prompt-tokens", prompt,
                "--top-p", "0", "--out", out);
}

/* Reads a file's bytes for before/after comparisons. */
static char *slurp(const char *dir, const char *name, size_t *len) {
    char path[1200], *data;
    snprintf(path, sizeof path, "%s/%s", dir, name);
    if (zy_read_file(path, &data, len) != ZY_OK) fail_msg("%s", zy_errmsg());
    return data;
}

static void expect_unchanged(const char *dir, const char *name, const char *before, size_t len) {
    size_t n;
    char *now = slurp(dir, name, &n);
    if (n != len || memcmp(now, before, n) != 0) fail_msg("%s/%s was changed", dir, name);
    free(now);
}

static void test_init_refuses_existing_checkpoint(void **state) {
    (void)state;
    char dir[256];
    tmp_path(dir, sizeof dir, "existing");
    run_result r = RUN("init", "--preset", "tiny", "--out", dir, "--seed", "1");
    expect_ok(&r, "init into a new folder");
    result_free(&r);
    size_t nc, nm;
    char *cfg = slurp(dir, "config.json", &nc), *model = slurp(dir, "model.safetensors", &nm);
    EXPECT_FAIL(dir, NULL, NULL, "init", "--preset", "tiny", "--out", dir, "--seed", "2");
    EXPECT_FAIL(dir, NULL, NULL, "init", "--preset", "bench-small", "--out", dir);
    expect_unchanged(dir, "config.json", cfg, nc);
    expect_unchanged(dir, "model.safetensors", model, nm);
    free(cfg);
    free(model);

    /* a sharded HF checkpoint: config.json + model.safetensors.index.json, no model.safetensors */
    tmp_path(dir, sizeof dir, "sharded");
    assert_int_equal(zy_mkdirs(dir), ZY_OK);
    char src[1024], path[1200];
    fixture(src, sizeof src, "config.json");
    snprintf(path, sizeof path, "%s/config.json", dir);
    copy_file(src, path, (size_t)-1);
    const char *index = "{\"metadata\": {}, \"weight_map\": {}}";
    snprintf(path, sizeof path, "%s/model.safetensors.index.json", dir);
    assert_int_equal(zy_write_file_atomic(path, index, strlen(index)), ZY_OK);
    cfg = slurp(dir, "config.json", &nc);
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    EXPECT_FAIL(dir, NULL, path, "init", "--preset", "tiny", "--out", dir);
    expect_unchanged(dir, "config.json", cfg, nc);
    free(cfg);

    /* --out naming a file */
    tmp_path(path, sizeof path, "plain_file");
    assert_int_equal(zy_write_file_atomic(path, "x", 1), ZY_OK);
    EXPECT_FAIL(path, "not a directory", NULL, "init", "--preset", "tiny", "--out", path);
    expect_unchanged(tmp, "plain_file", "x", 1);
}

static int setup(void **state) {
    (void)state;
    bin = getenv("ZAYAC_BIN");
    const char *r = getenv("ZAYAC_ROOT");
    if (!bin || !r) {
        fprintf(stderr, "test_cli: set ZAYAC_BIN and ZAYAC_ROOT (make test does)\n");
        return -1;
    }
    snprintf(root, sizeof root, "%s", r);
    snprintf(small_a, sizeof small_a, "%s/tests/fixtures/hf/small_a", root);
    snprintf(tmp, sizeof tmp, "/tmp/zy_cli_XXXXXX");
    if (!mkdtemp(tmp)) return -1;
    spawn_sanitizer_exit(SAN_EXIT);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(tmp) == ZY_OK ? 0 : -1;
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_info_counts),
        cmocka_unit_test(test_init_then_logits),
        cmocka_unit_test(test_logits_matches_transformers),
        cmocka_unit_test(test_generate_matches_transformers),
        cmocka_unit_test(test_generate_stops_at_any_eos),
        cmocka_unit_test(test_export),
        cmocka_unit_test(test_bad_input),
        cmocka_unit_test(test_init_refuses_existing_checkpoint),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
