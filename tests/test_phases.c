/* Multi-phase training (the config's "phases", issue 17.6), end to end through the CLI on the
 * recipe configs/train-zaya1-phases.json (4k context, a shifted mixture, then 4x the context with
 * RoPE theta 1e4 -> 1e6, scaled to the tiny model) over two sources made here from the corpus
 * helper. What the runs must show is worked out from the recipe's numbers: each step's phase and
 * tokens (batch x seq_len of its phase), the RoPE base in each checkpoint's config.json and in an
 * export, how many windows each source gave when it leaves and comes back, the same losses bit for
 * bit when the run stops in the middle of phase 2 and resumes, and the refusals with their
 * reasons. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "corpus_util.h"
#include "spawn_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmp[64], recipe[1024];
static const char *bin;

static run_result run(const char *const *args) {
    return spawn_capture(bin, tmp, args);
}
#define RUN(...) run((const char *const[]){__VA_ARGS__, NULL})

static void expect_code(run_result r, int code, const char *what) {
    if (r.code != code)
        fail_msg("%s: exit %d, expected %d:\n%s\n%s", what, r.code, code, r.out, r.err);
}

static cJSON *read_json(const char *path) {
    char *text;
    if (zy_read_file(path, &text, NULL) != ZY_OK) fail_msg("%s", zy_errmsg());
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    return j;
}

static int setup(void **state) {
    (void)state;
    bin = getenv("ZAYAC_BIN");
    if (!bin) bin = "build/zayac";
    char cwd[512];
    const char *root = getenv("ZAYAC_ROOT");
    if (!root) root = getcwd(cwd, sizeof cwd);
    snprintf(recipe, sizeof recipe, "%s/configs/train-zaya1-phases.json", root);
    static char abs_bin[1024];
    if (bin[0] != '/') { /* the runs work in tmp: the recipe's paths are relative to it */
        snprintf(abs_bin, sizeof abs_bin, "%s/%s", getcwd(cwd, sizeof cwd), bin);
        bin = abs_bin;
    }
    snprintf(tmp, sizeof tmp, "/tmp/zy_phases_XXXXXX");
    assert_non_null(mkdtemp(tmp));
    assert_int_equal(chdir(tmp), 0);
    assert_int_equal(zy_mkdirs("text"), ZY_OK);
    assert_int_equal(zy_mkdirs("runs/phases"), ZY_OK);
    /* two sources of different vocabularies: "web" (24 words) and "curated" (12) */
    assert_int_equal(corpus_write("text/web.txt", 7, 300, 24), 0);
    assert_int_equal(corpus_write("curated.txt", 8, 300, 12), 0);
    run_result r = RUN("tokenizer", "train", "--input", "text", "--vocab-size", "320", "--out",
                       "runs/phases/tokenizer.json");
    expect_code(r, 0, "tokenizer train");
    result_free(&r);
    const char *src[2][2] = {{"text/web.txt", "runs/phases/web"},
                             {"curated.txt", "runs/phases/curated"}};
    for (int i = 0; i < 2; i++) {
        r = RUN("data", "prepare", "--tokenizer", "runs/phases/tokenizer.json", "--input",
                src[i][0], "--out", src[i][1], "--val-fraction", "0.1");
        expect_code(r, 0, "data prepare");
        result_free(&r);
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    zy_remove_tree(tmp);
    return 0;
}

/* The recipe's phases as numbers: steps, batch and seq_len of each (what a phase leaves out
 * carries on from the one before, the first from the top level), and the step where it ends. */
typedef struct {
    int n;
    long steps[8], batch[8], seq[8], end[8];
} plan;

static plan recipe_plan(void) {
    cJSON *c = read_json(recipe);
    plan p = {0};
    long b = cJSON_GetObjectItem(c, "batch_size")->valueint;
    long t = cJSON_GetObjectItem(c, "seq_len")->valueint, end = 0;
    const cJSON *ph;
    cJSON_ArrayForEach(ph, cJSON_GetObjectItem(c, "phases")) {
        const cJSON *v;
        if ((v = cJSON_GetObjectItem(ph, "batch_size"))) b = v->valueint;
        if ((v = cJSON_GetObjectItem(ph, "seq_len"))) t = v->valueint;
        p.steps[p.n] = cJSON_GetObjectItem(ph, "steps")->valueint;
        p.batch[p.n] = b;
        p.seq[p.n] = t;
        end += p.steps[p.n];
        p.end[p.n++] = end;
    }
    cJSON_Delete(c);
    return p;
}

/* Runs the recipe straight into runs/a once (the reference of the other tests). */
static void straight_run(void) {
    if (zy_path_exists("runs/a/checkpoints")) return;
    run_result r = RUN("train", "--config", recipe, "--out", "runs/a");
    expect_code(r, 0, "the phased recipe");
    assert_non_null(strstr(r.out, "phase 2/3 (phases[1]"));
    assert_non_null(strstr(r.out, "phase 3/3 (phases[2]"));
    result_free(&r);
}

/* "step loss" of each metrics row that has a loss, joined by newlines. */
static char *losses(const char *run_dir) {
    char p[256], *text;
    snprintf(p, sizeof p, "%s/metrics.jsonl", run_dir);
    if (zy_read_file(p, &text, NULL) != ZY_OK) fail_msg("%s", zy_errmsg());
    char *out = zy_calloc(strlen(text) + 1, 1);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *l = strstr(line, "\"loss\":");
        if (!l) continue;
        strncat(out, line, (size_t)(strchr(line, ',') - line));
        strncat(out, " ", 2);
        strncat(out, l + 7, strcspn(l + 7, ",}"));
        strcat(out, "\n");
    }
    free(text);
    return out;
}

static double theta_of(const char *ckpt, const char *type) {
    char p[512];
    snprintf(p, sizeof p, "%s/model/config.json", ckpt); /* a checkpoint's HF folder */
    if (!zy_path_exists(p)) snprintf(p, sizeof p, "%s/config.json", ckpt); /* an export */
    cJSON *c = read_json(p);
    const cJSON *t = cJSON_GetObjectItem(cJSON_GetObjectItem(c, "rope_parameters"), type);
    assert_non_null(t);
    const double x = cJSON_GetObjectItem(t, "rope_theta")->valuedouble;
    cJSON_Delete(c);
    return x;
}

/* Every step row says its phase and the tokens so far (each step at its phase's batch x seq_len);
 * the loss plot is written. */
static void test_recipe_phases_in_metrics(void **state) {
    (void)state;
    straight_run();
    const plan p = recipe_plan();
    assert_int_equal(p.n, 3);
    char *text;
    assert_int_equal(zy_read_file("runs/a/metrics.jsonl", &text, NULL), ZY_OK);
    long rows = 0;
    double tokens = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *row = cJSON_Parse(line);
        assert_non_null(row);
        if (cJSON_GetObjectItem(row, "loss")) {
            const long step = (long)cJSON_GetObjectItem(row, "step")->valuedouble;
            int ph = 0;
            while (step > p.end[ph]) ph++;
            tokens += (double)p.batch[ph] * p.seq[ph];
            const cJSON *phase = cJSON_GetObjectItem(row, "phase");
            assert_non_null(phase);
            assert_int_equal((int)phase->valuedouble, ph);
            assert_true(cJSON_GetObjectItem(row, "tokens_seen")->valuedouble == tokens);
            rows++;
        }
        cJSON_Delete(row);
    }
    free(text);
    assert_int_equal(rows, p.end[2]);
    char path[256];
    snprintf(path, sizeof path, "runs/a/checkpoints/step_%09ld/train/state.json", p.end[2]);
    cJSON *st = read_json(path);
    assert_true(cJSON_GetObjectItem(st, "tokens_seen")->valuedouble == tokens);
    cJSON_Delete(st);
    assert_true(zy_path_exists("runs/a/loss.png"));
}

/* The RoPE base: 1e4 in the checkpoints of phases 1 and 2, 1e6 (hybrid layers) from phase 3 on,
 * in the checkpoint's config.json and in its HF export; hybrid_sliding keeps 1e4. */
static void test_recipe_rope_theta(void **state) {
    (void)state;
    straight_run();
    assert_true(theta_of("runs/a/checkpoints/step_000000010", "hybrid") == 1e4);
    assert_true(theta_of("runs/a/checkpoints/step_000000012", "hybrid") == 1e6);
    assert_true(theta_of("runs/a/checkpoints/step_000000014", "hybrid") == 1e6);
    assert_true(theta_of("runs/a/checkpoints/step_000000014", "hybrid_sliding") == 1e4);
    run_result r = RUN("export", "--model", "runs/a/checkpoints/step_000000014", "--out", "hf");
    expect_code(r, 0, "export");
    result_free(&r);
    assert_true(theta_of("hf", "hybrid") == 1e6);
}

/* The base is used, not only recorded: two runs that differ only in phase 2's theta train the
 * same first phase and then differ. */
static void test_rope_theta_changes_training(void **state) {
    (void)state;
    const char *theta[2] = {"10000", "1000000"};
    char *l[2];
    for (int i = 0; i < 2; i++) {
        char phases[256], out[32];
        snprintf(phases, sizeof phases,
                 "phases=[{\"steps\": 2}, {\"steps\": 2, \"rope_theta\": %s}]", theta[i]);
        snprintf(out, sizeof out, "runs/theta%d", i);
        run_result r = RUN("train", "--config", recipe, "--out", out, "--set", phases, "--set",
                           "eval_interval=0", "--set", "checkpoint_interval=0");
        expect_code(r, 0, "theta run");
        result_free(&r);
        l[i] = losses(out);
    }
    print_message("theta 1e4:\n%stheta 1e6:\n%s", l[0], l[1]);
    char *second = strchr(strchr(l[0], '\n') + 1, '\n') + 1; /* after steps 1 and 2 */
    const size_t head = (size_t)(second - l[0]);
    assert_memory_equal(l[0], l[1], head);
    assert_string_not_equal(l[0] + head, l[1] + head);
    free(l[0]);
    free(l[1]);
}

/* Stopped in the middle of phase 2 (--stop-after 8) and resumed: the same losses bit for bit and
 * the same final weights as the straight run. */
static void test_resume_in_phase2_is_exact(void **state) {
    (void)state;
    straight_run();
    run_result r = RUN("train", "--config", recipe, "--out", "runs/b", "--stop-after", "8");
    expect_code(r, 3, "stop in phase 2");
    result_free(&r);
    r = RUN("train", "--config", recipe, "--out", "runs/b", "--resume");
    expect_code(r, 0, "resume in phase 2");
    assert_non_null(strstr(r.out, "resume: in phase 2/3 (phases[1]"));
    result_free(&r);
    char *a = losses("runs/a"), *b = losses("runs/b");
    assert_string_equal(a, b);
    free(a);
    free(b);
    zy_mmap wa, wb;
    assert_int_equal(zy_mmap_open(&wa, "runs/a/checkpoints/step_000000014/model/model.safetensors"),
                     0);
    assert_int_equal(zy_mmap_open(&wb, "runs/b/checkpoints/step_000000014/model/model.safetensors"),
                     0);
    assert_int_equal(wa.size, wb.size);
    assert_memory_equal(wa.data, wb.data, wa.size);
    zy_mmap_close(&wa);
    zy_mmap_close(&wb);
}

/* u64 "drawn" counts of a checkpoint's train_loader and a source's tokens in its phase record. */
static cJSON *final_state(const char *run_dir, int step) {
    char p[256];
    snprintf(p, sizeof p, "%s/checkpoints/step_%09d/train/state.json", run_dir, step);
    return read_json(p);
}

static long long position(const cJSON *st, const char *path) {
    const cJSON *e;
    cJSON_ArrayForEach(e, cJSON_GetObjectItem(cJSON_GetObjectItem(st, "phases"), "positions")) {
        if (!strcmp(cJSON_GetObjectItem(e, "path")->valuestring, path))
            return atoll(cJSON_GetObjectItem(e, "tokens")->valuestring);
    }
    fail_msg("no position for %s", path);
    return -1;
}

/* A source used in phases 1 and 3 continues in phase 3 where phase 1 left it: web gives 3 + 3
 * steps of 8 windows, curated 2 x 8 between. With a longer seq_len the position carries over in
 * tokens: 2 x 8 windows of 64 are 8 windows of 128, then 2 x 4 more. */
static void test_source_positions_kept(void **state) {
    (void)state;
    const char *web = "{\"path\": \"runs/phases/web\", \"weight\": 1}";
    const char *cur = "{\"path\": \"runs/phases/curated\", \"weight\": 1}";
    char phases[1024];
    snprintf(phases, sizeof phases,
             "phases=[{\"steps\": 3, \"data\": [%s]}, {\"steps\": 2, \"data\": [%s]}, "
             "{\"steps\": 3, \"data\": [%s]}]",
             web, cur, web);
    run_result r = RUN("train", "--config", recipe, "--out", "runs/pos", "--set", phases, "--set",
                       "eval_interval=0", "--set", "checkpoint_interval=0");
    expect_code(r, 0, "web, curated, web");
    result_free(&r);
    cJSON *st = final_state("runs/pos", 8);
    const cJSON *drawn = cJSON_GetObjectItem(cJSON_GetObjectItem(st, "train_loader"), "drawn");
    assert_int_equal(cJSON_GetArraySize(drawn), 1);
    assert_int_equal(atoll(cJSON_GetArrayItem(drawn, 0)->valuestring), (3 + 3) * 8);
    assert_int_equal(position(st, "runs/phases/web"), (3 + 3) * 8 * 64);
    assert_int_equal(position(st, "runs/phases/curated"), 2 * 8 * 64);
    cJSON_Delete(st);

    snprintf(phases, sizeof phases,
             "phases=[{\"steps\": 2, \"data\": [%s]}, {\"steps\": 2, \"seq_len\": 128, "
             "\"batch_size\": 4}]",
             web);
    r = RUN("train", "--config", recipe, "--out", "runs/pos2", "--set", phases, "--set",
            "eval_interval=0", "--set", "checkpoint_interval=0");
    expect_code(r, 0, "seq_len 64 then 128");
    result_free(&r);
    st = final_state("runs/pos2", 4);
    drawn = cJSON_GetObjectItem(cJSON_GetObjectItem(st, "train_loader"), "drawn");
    assert_int_equal(atoll(cJSON_GetArrayItem(drawn, 0)->valuestring), 2 * 8 * 64 / 128 + 2 * 4);
    assert_true(cJSON_GetObjectItem(st, "tokens_seen")->valuedouble == 2 * 8 * 64 + 2 * 4 * 128);
    cJSON_Delete(st);
}

/* A run stopped in phase 2, resumed with configs it cannot continue: exit 2 naming the key; an
 * edit it can continue (the lr) is reported key by key and the run goes on. */
static void test_resume_refusals(void **state) {
    (void)state;
    run_result r = RUN("train", "--config", recipe, "--out", "runs/r", "--stop-after", "8");
    expect_code(r, 3, "stop in phase 2");
    result_free(&r);
    cJSON *c = read_json(recipe);
    cJSON *ph = cJSON_GetObjectItem(c, "phases");
    /* phase 1 (already run) with another seq_len */
    cJSON_AddNumberToObject(cJSON_GetArrayItem(ph, 0), "seq_len", 32);
    char *list = cJSON_PrintUnformatted(ph), set[4096];
    snprintf(set, sizeof set, "phases=%s", list);
    free(list);
    r = RUN("train", "--config", recipe, "--out", "runs/r", "--resume", "--set", set);
    expect_code(r, 2, "an earlier phase changed");
    assert_non_null(strstr(r.err, "phases that already ran (phases[0].seq_len: 64 -> 32"));
    assert_non_null(strstr(r.out, "phases[0].seq_len: 64 -> 32")); /* the changed keys */
    result_free(&r);
    /* phase 2 made shorter than the 2 steps it has run */
    cJSON_DeleteItemFromObject(cJSON_GetArrayItem(ph, 0), "seq_len");
    cJSON_ReplaceItemInObject(cJSON_GetArrayItem(ph, 1), "steps", cJSON_CreateNumber(1));
    list = cJSON_PrintUnformatted(ph);
    snprintf(set, sizeof set, "phases=%s", list);
    free(list);
    cJSON_Delete(c);
    r = RUN("train", "--config", recipe, "--out", "runs/r", "--resume", "--set", set);
    expect_code(r, 2, "the current phase ends before the checkpoint");
    assert_non_null(strstr(r.err, "2 steps into phases[1] but the config makes that phase 1"));
    result_free(&r);
    /* the phases dropped */
    r = RUN("train", "--config", recipe, "--out", "runs/r", "--resume", "--set", "phases=[]",
            "--set", "steps=14");
    expect_code(r, 2, "phases dropped");
    assert_non_null(strstr(r.err, "a run with phases but the config lists none"));
    result_free(&r);
    /* a change it can continue: reported, and the run finishes */
    r = RUN("train", "--config", recipe, "--out", "runs/r", "--resume", "--set",
            "optimizer.lr=0.002");
    expect_code(r, 0, "resume with another lr");
    assert_non_null(strstr(r.out, "optimizer.lr: 0.003 -> 0.002"));
    result_free(&r);
}

/* Phase configs that cannot run: exit 2 with the key named. */
/* A later phase's data written by another tokenizer is refused (exit 2, naming the phase) when
 * that phase starts, before any of its steps, as the first phase's is at start-up. */
static void test_phase_data_of_another_tokenizer(void **state) {
    (void)state;
    run_result r = RUN("tokenizer", "train", "--input", "curated.txt", "--vocab-size", "300",
                       "--out", "runs/other_tok.json");
    expect_code(r, 0, "another tokenizer");
    result_free(&r);
    r = RUN("data", "prepare", "--tokenizer", "runs/other_tok.json", "--input", "curated.txt",
            "--out", "runs/phases/other", "--val-fraction", "0.1");
    expect_code(r, 0, "data prepare with another tokenizer");
    result_free(&r);
    const char *phases = "phases=[{\"steps\": 2}, {\"steps\": 2, \"data\": "
                         "[{\"path\": \"runs/phases/other\", \"weight\": 1}]}]";
    r = RUN("train", "--config", recipe, "--out", "runs/othertok", "--set", phases, "--set",
            "eval_interval=0", "--set", "checkpoint_interval=0");
    if (r.code != 2 || !strstr(r.err, "phases[1]") || !strstr(r.err, "runs/phases/other"))
        fail_msg("exit %d, expected 2 naming phases[1] and the data:\n%s", r.code, r.err);
    result_free(&r);
}

static void test_config_refusals(void **state) {
    (void)state;
    static const struct {
        const char *set, *message;
    } cases[] = {
        {"phases=[{\"steps\": 2, \"tokens\": 100}]", "phases[0]: give its length as exactly one"},
        {"phases=[{\"steps\": 2, \"seqlen\": 64}]", "phases[0]: unknown key seqlen"},
        {"phases=[{\"steps\": 2}, {\"steps\": 2, \"seq_len\": 4096}]",
         "phases[1].seq_len = 4096 exceeds the model's max_position_embeddings 2048"},
        {"phases=[{\"steps\": 2, \"schedule\": {\"warmpu\": 1}}]",
         "unknown key schedule.warmpu (did you mean schedule.warmup?)"},
        {"phases=[{\"steps\": 2, \"rope_theta\": {\"global\": 1e6}}]",
         "phases[0].rope_theta: unknown layer type \"global\""},
        {"phases=[{\"steps\": 0}]", "phases[0]: steps = 0 is outside"},
        {"steps=5", "steps = 5 but the phases add up to 14 steps"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        run_result r = RUN("train", "--config", recipe, "--set", cases[i].set, "--print-config");
        expect_code(r, 2, cases[i].set);
        if (!strstr(r.err, cases[i].message))
            fail_msg("%s: expected \"%s\" in:\n%s", cases[i].set, cases[i].message, r.err);
        result_free(&r);
    }
    /* a length in tokens: whole steps of batch x seq_len, rounded up (1000 / 512 -> 2) */
    run_result r =
        RUN("train", "--config", recipe, "--set", "phases=[{\"tokens\": 1000}]", "--print-config");
    expect_code(r, 0, "tokens");
    cJSON *c = cJSON_Parse(r.out);
    assert_non_null(c);
    assert_int_equal(cJSON_GetObjectItem(c, "steps")->valueint, 2);
    cJSON_Delete(c);
    result_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_recipe_phases_in_metrics),
        cmocka_unit_test(test_recipe_rope_theta),
        cmocka_unit_test(test_rope_theta_changes_training),
        cmocka_unit_test(test_resume_in_phase2_is_exact),
        cmocka_unit_test(test_source_positions_kept),
        cmocka_unit_test(test_resume_refusals),
        cmocka_unit_test(test_phase_data_of_another_tokenizer),
        cmocka_unit_test(test_config_refusals),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
