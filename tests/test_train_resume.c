/* Exact resume, end to end through the CLI: train N steps straight, and N/2 + checkpoint + resume +
 * N/2, on the same data and config; the per-step losses must be bit-identical and so must the
 * final weights. Also: --resume skips (and reports) a corrupt newest checkpoint. With a GPU (the
 * tests skip without one): exact resume on the GPU too, and 200 steps on the GPU (bf16
 * activations) track the CPU's fp32 loss curve. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/crc32c.h"
#include "base/err.h"
#include "io/safetensors.h"
#include "base/fileio.h"
#include "base/rng.h"
#include "ops/ops.h"
#include "ckpt_compare.h"
#include "corpus_util.h"
#include "spawn_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>

static char tmp[64];
static const char *bin;

static void run_ok(const char *const *args) {
    run_result r = spawn_capture(bin, tmp, args);
    if (r.code != 0) fail_msg("zayac %s failed (%d):\n%s\n%s", args[0], r.code, r.out, r.err);
    result_free(&r);
}
#define RUN_OK(...) run_ok((const char *const[]){__VA_ARGS__, NULL})

/* A run stopped on request (--stop-after) exits 3 after writing its checkpoint. */
static void run_stopped(const char *const *args) {
    run_result r = spawn_capture(bin, tmp, args);
    if (r.code != 3)
        fail_msg("zayac %s: exit %d, expected 3:\n%s\n%s", args[0], r.code, r.out, r.err);
    assert_non_null(strstr(r.out, "stopped on request"));
    result_free(&r);
}
#define RUN_STOPPED(...) run_stopped((const char *const[]){__VA_ARGS__, NULL})

static void path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", tmp, name);
}

/* A deterministic corpus of sentences from a small vocabulary (documents split by blank lines). */
static void write_corpus(void) {
    char p[256];
    path(p, sizeof p, "corpus.txt");
    assert_int_equal(corpus_write(p, 7, 200, 24), 0);
}

static const char *config_json =
    "{\"model\": {\"model_type\": \"zaya\", \"vocab_size\": 320, \"hidden_size\": 32,"
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
    " \"head_dim\": 32, \"num_experts\": 3, \"moe_intermediate_size\": 16, \"router_hidden_size\": "
    "8,"
    " \"max_position_embeddings\": 64, \"pad_token_id\": 2, \"bos_token_id\": 0,"
    " \"eos_token_id\": 1},"
    " \"tokenizer\": \"%s/tok.json\", \"data\": \"%s/data\", \"batch_size\": 2, \"seq_len\": 16,"
    " \"grad_accum\": 2, \"steps\": 8, \"eval_interval\": 4, \"eval_batches\": 2,"
    " \"checkpoint_interval\": 4, \"keep_checkpoints\": 3, \"log_interval\": 1, \"seed\": 5,"
    " \"optimizer\": {\"name\": \"muon\", \"lr\": 0.01%s}, \"schedule\": {\"warmup\": 2},"
    " \"samples\": {\"prompts\": [\"the cat\"], \"tokens\": 12}, \"device\": \"%s\"}";

static int setup(void **state) {
    (void)state;
    bin = getenv("ZAYAC_BIN");
    if (!bin) bin = "build/zayac";
    snprintf(tmp, sizeof tmp, "/tmp/zy_resume_XXXXXX");
    assert_non_null(mkdtemp(tmp));
    write_corpus();
    char corpus[256], tok[256], data[256];
    path(corpus, sizeof corpus, "corpus.txt");
    path(tok, sizeof tok, "tok.json");
    path(data, sizeof data, "data");
    assert_int_equal(corpus_tokenize(bin, tmp, corpus, "320", "0.1", tok, data), 0);
    const char *devices[2] = {"cpu", "cuda"};
    for (int i = 0; i < 2; i++) { /* train_DEV.json, and train_DEV_bf16m.json: bf16 AdamW moments
                                     and Muon momentum */
        for (int b = 0; b < 2; b++) {
            char cfg[256], text[2048];
            snprintf(cfg, sizeof cfg, "%s/train_%s%s.json", tmp, devices[i], b ? "_bf16m" : "");
            snprintf(text, sizeof text, config_json, tmp, tmp,
                     b ? ", \"adam_moments\": \"bfloat16\", \"muon_momentum_dtype\": \"bfloat16\""
                       : "",
                     devices[i]);
            assert_int_equal(zy_write_file_atomic(cfg, text, strlen(text)), ZY_OK);
        }
    }
    return 0;
}

static int teardown(void **state) {
    (void)state;
    zy_remove_tree(tmp);
    return 0;
}

/* The "loss" value text of each JSONL line, in order, joined by newlines. */
static char *losses(const char *run) {
    char p[256], *text;
    snprintf(p, sizeof p, "%s/%s/metrics.jsonl", tmp, run);
    if (zy_read_file(p, &text, NULL) != ZY_OK) fail_msg("%s", zy_errmsg());
    char *out = zy_calloc(strlen(text) + 1, 1);
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        char *l = strstr(line, "\"loss\":");
        if (!l) continue;
        l += 7;
        size_t n = strcspn(l, ",}");
        strncat(out, line, (size_t)(strchr(line, ',') - line)); /* the "step" field */
        strncat(out, " ", 2);
        strncat(out, l, n);
        strcat(out, "\n");
    }
    free(text);
    return out;
}

static void resume_is_exact(const char *device) {
    char cfg[256], out_a[256], out_b[256];
    snprintf(cfg, sizeof cfg, "%s/train_%s.json", tmp, device);
    snprintf(out_a, sizeof out_a, "%s/a_%s", tmp, device);
    snprintf(out_b, sizeof out_b, "%s/b_%s", tmp, device);
    RUN_OK("train", "--config", cfg, "--out", out_a);
    RUN_STOPPED("train", "--config", cfg, "--out", out_b, "--stop-after", "4");
    RUN_OK("train", "--config", cfg, "--out", out_b, "--resume");
    char *la = losses(out_a + strlen(tmp) + 1), *lb = losses(out_b + strlen(tmp) + 1);
    print_message("straight:\n%sresumed:\n%s", la, lb);
    int lines = 0;
    for (char *p = la; *p; p++) lines += *p == '\n';
    assert_int_equal(lines, 8);
    assert_string_equal(la, lb);
    free(la);
    free(lb);
    zy_mmap wa, wb;
    char pa[512], pb[512];
    snprintf(pa, sizeof pa, "%s/checkpoints/step_000000008/model/model.safetensors", out_a);
    snprintf(pb, sizeof pb, "%s/checkpoints/step_000000008/model/model.safetensors", out_b);
    assert_int_equal(zy_mmap_open(&wa, pa), ZY_OK);
    assert_int_equal(zy_mmap_open(&wb, pb), ZY_OK);
    assert_int_equal(wa.size, wb.size);
    assert_memory_equal(wa.data, wb.data, wa.size);
    zy_mmap_close(&wa);
    zy_mmap_close(&wb);
}

static void test_resume_is_exact(void **state) {
    (void)state;
    resume_is_exact("cpu");
}

static void test_resume_is_exact_gpu(void **state) {
    (void)state;
    if (ops_cuda_device_count() == 0) skip();
    resume_is_exact("cuda");
}

/* bf16 AdamW moments and Muon momentum: the checkpoint holds them widened to fp32 and a resume
 * rounds them back (exactly), and the stochastic roundings are drawn from (step, index), so the
 * resumed run is the straight one to the bit; on the GPU through the host mirror's staging. */
static void test_resume_is_exact_bf16_moments(void **state) {
    (void)state;
    const char *devices[2] = {"cpu_bf16m", "cuda_bf16m"};
    for (int i = 0; i < (ops_cuda_device_count() > 0 ? 2 : 1); i++) {
        resume_is_exact(devices[i]);
        /* the settings reached the optimizer: every saved moment and momentum is a bf16 value
         * (its low 16 bits zero), which fp32 ones almost never are */
        char p[512];
        snprintf(p, sizeof p,
                 "%s/a_%s/checkpoints/step_000000008/train/train_state.rank_0.safetensors", tmp,
                 devices[i]);
        zy_safetensors f;
        assert_int_equal(safetensors_open(&f, p), ZY_OK);
        size_t moments = 0, bf16_values = 0, momenta = 0, bf16_momenta = 0;
        for (int k = 0; k < f.count; k++) {
            const int muon = strncmp(f.tensors[k].name, "muon_momentum.", 14) == 0;
            if (!muon && strncmp(f.tensors[k].name, "exp_avg", 7) != 0) continue;
            float *x = malloc(f.tensors[k].numel * sizeof *x);
            assert_int_equal(safetensors_read_index_f32(&f, k, x), ZY_OK);
            for (size_t j = 0; j < f.tensors[k].numel; j++) {
                uint32_t u;
                memcpy(&u, &x[j], 4);
                *(muon ? &momenta : &moments) += 1;
                *(muon ? &bf16_momenta : &bf16_values) += (u & 0xffffu) == 0;
            }
            free(x);
        }
        safetensors_close(&f);
        print_message("%s: %zu of %zu saved AdamW moments and %zu of %zu Muon momenta are bf16 "
                      "values\n",
                      devices[i], bf16_values, moments, bf16_momenta, momenta);
        assert_true(moments > 1000 && momenta > 1000);
        assert_int_equal(bf16_values, moments);
        assert_int_equal(bf16_momenta, momenta);
    }
}

/* The losses of a run's metrics.jsonl as numbers: out[n] (n up to max); returns n. */
static int loss_values(const char *run, double *out, int max) {
    char *text = losses(run);
    int n = 0;
    for (char *line = strtok(text, "\n"); line && n < max; line = strtok(NULL, "\n"))
        out[n++] = strtod(strchr(line, ' ') + 1, NULL);
    free(text);
    return n;
}

/* 200 steps of the same config, data and initial weights on the CPU (fp32) and the GPU (bf16
 * activations, fp32 master weights): the curves must agree to within bf16 noise. */
static void test_gpu_tracks_cpu(void **state) {
    (void)state;
    if (ops_cuda_device_count() == 0) skip();
    const char *devices[2] = {"cpu", "cuda"};
    enum { STEPS = 200 };
    static double loss[2][STEPS];
    for (int i = 0; i < 2; i++) {
        char cfg[256], out[256];
        snprintf(cfg, sizeof cfg, "%s/train_%s.json", tmp, devices[i]);
        snprintf(out, sizeof out, "%s/curve_%s", tmp, devices[i]);
        /* the run ends by sampling from the prompt: decoding with the caches on that device */
        run_result r = spawn_capture(
            bin, tmp,
            (const char *const[]){"train", "--config", cfg, "--out", out, "--steps", "200", "--set",
                                  "eval_interval=0", "--set", "checkpoint_interval=0", NULL});
        if (r.code != 0) fail_msg("train on %s failed:\n%s\n%s", devices[i], r.out, r.err);
        const char *sample = strstr(r.out, "--- the cat");
        assert_non_null(sample);
        print_message("%s sample: %.80s\n", devices[i], sample);
        result_free(&r);
        char run[64];
        snprintf(run, sizeof run, "curve_%s", devices[i]);
        assert_int_equal(loss_values(run, loss[i], STEPS), STEPS);
    }
    double worst = 0, mean_first = 0, mean_last[2] = {0, 0};
    for (int s = 0; s < STEPS; s++) {
        double rel = fabs(loss[1][s] - loss[0][s]) / loss[0][s];
        if (rel > worst) worst = rel;
        if (s < 10) mean_first += loss[0][s] / 10;
        for (int i = 0; i < 2; i++)
            if (s >= STEPS - 20) mean_last[i] += loss[i][s] / 20;
    }
    print_message("cpu loss %.4f -> %.4f, gpu -> %.4f over %d steps; worst per-step relative "
                  "difference %.3g, last-20 means differ by %.3g\n",
                  mean_first, mean_last[0], mean_last[1], STEPS, worst,
                  fabs(mean_last[1] - mean_last[0]) / mean_last[0]);
    assert_true(mean_last[0] < 0.8 * mean_first); /* it learned something */
    /* bf16 rounding (2^-8 relative) per op perturbs each step's loss by well under 1%; the runs
     * drift apart slowly, so the late curve agrees to a few percent. */
    assert_true(fabs(mean_last[1] - mean_last[0]) / mean_last[0] < 0.03);
    assert_true(worst < 0.05);
}

static void test_resume_skips_corrupt(void **state) {
    (void)state;
    char cfg[256], out_c[256], p[512];
    path(cfg, sizeof cfg, "train_cpu.json");
    path(out_c, sizeof out_c, "c");
    RUN_STOPPED("train", "--config", cfg, "--out", out_c, "--stop-after", "4");
    RUN_STOPPED("train", "--config", cfg, "--out", out_c, "--resume", "--stop-after", "2");
    /* corrupt the newest (step 6): resume must fall back to step 4 and say so */
    snprintf(p, sizeof p, "%s/checkpoints/step_000000006/train/train_state.rank_0.safetensors",
             out_c);
    FILE *f = fopen(p, "r+b");
    assert_non_null(f);
    fseek(f, -3, SEEK_END);
    fputc('x', f);
    fclose(f);
    run_result r = spawn_capture(
        bin, tmp,
        (const char *const[]){"train", "--config", cfg, "--out", out_c, "--resume", NULL});
    if (r.code != 0) fail_msg("resume failed:\n%s\n%s", r.out, r.err);
    assert_non_null(strstr(r.out, "skipping a corrupt checkpoint"));
    assert_non_null(strstr(r.out, "step_000000006"));
    assert_non_null(strstr(r.out, "(step 4)"));
    result_free(&r);
}

static int step_rows(const char *out);

/* `zayac train ARGS` expected to fail with bad input (2) saying `want` on stderr. */
static void run_refused(const char *want, const char *const *args) {
    run_result r = spawn_capture(bin, tmp, args);
    if (r.code != 2 || !strstr(r.err, want))
        fail_msg("expected exit 2 saying '%s', got %d:\n%s\n%s", want, r.code, r.out, r.err);
    result_free(&r);
}
#define RUN_REFUSED(want, ...) run_refused(want, (const char *const[]){__VA_ARGS__, NULL})

/* Entries of a folder whose names start with prefix. */
static int entries_named(const char *dir, const char *prefix) {
    char cmd[600];
    snprintf(cmd, sizeof cmd, "ls -A %s | grep -c '^%s' > %s/count.txt", dir, prefix, tmp);
    if (system(cmd) < 0) return -1;
    char p[256], *text;
    path(p, sizeof p, "count.txt");
    if (zy_read_file(p, &text, NULL) != ZY_OK) return -1;
    int n = atoi(text);
    free(text);
    return n;
}

/* A fresh run into a folder that holds one is refused unless --overwrite, which removes the old
 * checkpoints (renamed aside, then deleted: nothing half-deleted stays) and metrics; a folder left
 * renamed aside by a crash is removed by the next save. */
static void test_out_dir_holds_a_run(void **state) {
    (void)state;
    char cfg[256], out[256], ck[300], aside[400];
    path(cfg, sizeof cfg, "train_cpu.json");
    path(out, sizeof out, "g");
    RUN_STOPPED("train", "--config", cfg, "--out", out, "--stop-after", "4");
    const int before = step_rows(out); /* 4 steps */
    RUN_REFUSED("--overwrite", "train", "--config", cfg, "--out", out, "--stop-after", "1");
    RUN_REFUSED("give one", "train", "--config", cfg, "--out", out, "--resume", "--overwrite");
    snprintf(ck, sizeof ck, "%s/checkpoints", out);
    snprintf(aside, sizeof aside, "%s/.deleting_step_000000002.99", ck);
    assert_int_equal(zy_mkdirs(aside), ZY_OK); /* as a crash mid-delete leaves it */
    RUN_STOPPED("train", "--config", cfg, "--out", out, "--overwrite", "--stop-after", "1");
    assert_int_equal(entries_named(ck, "step_"), 1); /* step 1 only: step 4 went */
    assert_int_equal(entries_named(ck, "\\."), 0);   /* nothing aside, nothing temporary */
    assert_int_equal(before, 4);
    assert_int_equal(step_rows(out), 1); /* step 1 alone */
}

/* --resume where checkpoints exist but none verifies is an error listing why, not a fresh start. */
static void test_resume_with_none_verifying(void **state) {
    (void)state;
    char cfg[256], out[256], p[512];
    path(cfg, sizeof cfg, "train_cpu.json");
    path(out, sizeof out, "n");
    RUN_STOPPED("train", "--config", cfg, "--out", out, "--stop-after", "4");
    snprintf(p, sizeof p, "%s/checkpoints/step_000000004/model/model.safetensors", out);
    FILE *f = fopen(p, "r+b");
    assert_non_null(f);
    fseek(f, -3, SEEK_END);
    fputc('x', f);
    fclose(f);
    RUN_REFUSED("none of the 1 checkpoints", "train", "--config", cfg, "--out", out, "--resume");
    RUN_REFUSED("model/model.safetensors is corrupt", "train", "--config", cfg, "--out", out,
                "--resume");
}

/* Rewrites key of a checkpoint's state.json to value and fixes the manifest's size and CRC of
 * the file, as a careless hand edit would (the manifest alone would catch a plain edit). */
static void edit_state(const char *dir, const char *key, double value) {
    char p[512], *text;
    snprintf(p, sizeof p, "%s/train/state.json", dir);
    assert_int_equal(zy_read_file(p, &text, NULL), ZY_OK);
    cJSON *st = cJSON_Parse(text);
    free(text);
    assert_non_null(st);
    cJSON_ReplaceItemInObject(st, key, cJSON_CreateNumber(value));
    char *out = cJSON_PrintUnformatted(st);
    cJSON_Delete(st);
    assert_int_equal(zy_write_file_atomic(p, out, strlen(out)), ZY_OK);
    char crc[16];
    snprintf(crc, sizeof crc, "%08x", zy_crc32c(0, out, strlen(out)));
    const double bytes = (double)strlen(out);
    free(out);
    snprintf(p, sizeof p, "%s/manifest.json", dir);
    assert_int_equal(zy_read_file(p, &text, NULL), ZY_OK);
    cJSON *m = cJSON_Parse(text);
    free(text);
    cJSON *f;
    cJSON_ArrayForEach(f, cJSON_GetObjectItem(m, "files")) {
        if (strcmp(cJSON_GetObjectItem(f, "name")->valuestring, "train/state.json")) continue;
        cJSON_ReplaceItemInObject(f, "bytes", cJSON_CreateNumber(bytes));
        cJSON_ReplaceItemInObject(f, "crc32c", cJSON_CreateString(crc));
    }
    out = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    assert_int_equal(zy_write_file_atomic(p, out, strlen(out)), ZY_OK);
    free(out);
}

/* state.json's counters are checked: the step against its folder, the others against the step. */
static void test_state_json_checked(void **state) {
    (void)state;
    char cfg[256], out[256], dir[400];
    path(cfg, sizeof cfg, "train_cpu.json");
    path(out, sizeof out, "s");
    RUN_STOPPED("train", "--config", cfg, "--out", out, "--stop-after", "4");
    snprintf(dir, sizeof dir, "%s/checkpoints/step_000000004", out);
    edit_state(dir, "step", 5);
    RUN_REFUSED("\"step\" is 5 but the folder is step 4", "train", "--config", cfg, "--out", out,
                "--resume");
    edit_state(dir, "step", 4);
    edit_state(dir, "optimizer_step", -3);
    RUN_REFUSED("\"optimizer_step\" is -3", "train", "--config", cfg, "--out", out, "--resume");
    edit_state(dir, "optimizer_step", 4);
    RUN_STOPPED("train", "--config", cfg, "--out", out, "--resume", "--stop-after", "1");
}

/* Checkpoints are written in the background: a save that fails (here: as on a full disk) is
 * reported and the next one is attempted; a save asked for while the previous one is still being
 * written waits for it, saying so; the last save failing fails the run (exit 1); with
 * checkpoint_async off every save completes before training goes on. */
static void test_background_saves(void **state) {
    (void)state;
    char cfg[256], out[256], ck[300];
    path(cfg, sizeof cfg, "train_cpu.json");
    path(out, sizeof out, "bg");
    setenv("ZAYAC_FAULT", "enospc:step=4", 1);
    setenv("ZAYAC_CKPT_DELAY_MS", "300", 1);
    run_result r = spawn_capture(bin, tmp,
                                 (const char *const[]){"train", "--config", cfg, "--out", out,
                                                       "--set", "checkpoint_interval=2", NULL});
    unsetenv("ZAYAC_FAULT");
    unsetenv("ZAYAC_CKPT_DELAY_MS");
    if (r.code != 0) fail_msg("exit %d:\n%s\n%s", r.code, r.out, r.err);
    assert_non_null(strstr(r.err, "checkpoint step 4: writing checkpoint step 4: No space left"));
    assert_non_null(strstr(r.out, "waiting for checkpoint step"));
    assert_non_null(strstr(r.out, "in the background"));
    result_free(&r);
    snprintf(ck, sizeof ck, "%s/checkpoints", out);
    char p[400];
    snprintf(p, sizeof p, "%s/step_000000004", ck);
    assert_false(zy_path_exists(p)); /* the failed one left nothing under its name */
    snprintf(p, sizeof p, "%s/step_000000006/manifest.json", ck);
    assert_true(zy_path_exists(p)); /* the next one was attempted and landed */
    snprintf(p, sizeof p, "%s/step_000000008/manifest.json", ck);
    assert_true(zy_path_exists(p));
    assert_int_equal(entries_named(ck, "\\."), 0); /* no staging left behind */
    /* the last save failing is the run failing: the end state is not on disk */
    path(out, sizeof out, "bg_last");
    setenv("ZAYAC_FAULT", "enospc:step=8", 1);
    r = spawn_capture(bin, tmp,
                      (const char *const[]){"train", "--config", cfg, "--out", out, NULL});
    unsetenv("ZAYAC_FAULT");
    if (r.code != 1 || !strstr(r.err, "checkpoint step 8"))
        fail_msg("a failed last save: exit %d, expected 1:\n%s", r.code, r.err);
    result_free(&r);
    /* synchronous saves */
    path(out, sizeof out, "bg_sync");
    r = spawn_capture(bin, tmp,
                      (const char *const[]){"train", "--config", cfg, "--out", out, "--set",
                                            "checkpoint_async=false", NULL});
    if (r.code != 0 || strstr(r.out, "in the background") ||
        !strstr(r.out, "checkpoint step 8: stall"))
        fail_msg("synchronous saves: exit %d:\n%s\n%s", r.code, r.out, r.err);
    result_free(&r);
}

/* The metrics rows of a run that report a checkpoint (checkpoint_stall_s with the wait, the write
 * time, the bytes and the rate): their steps and waits into steps[max], wait[max]; returns how
 * many. */
static int checkpoint_rows(const char *out, long long *steps, double *waits, int max) {
    char p[512], *text;
    snprintf(p, sizeof p, "%s/metrics.jsonl", out);
    assert_int_equal(zy_read_file(p, &text, NULL), ZY_OK);
    int n = 0;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *row = cJSON_Parse(line);
        assert_non_null(row);
        const cJSON *stall = cJSON_GetObjectItem(row, "checkpoint_stall_s");
        if (stall) {
            const cJSON *w = cJSON_GetObjectItem(row, "checkpoint_write_s"),
                        *b = cJSON_GetObjectItem(row, "checkpoint_bytes"),
                        *g = cJSON_GetObjectItem(row, "checkpoint_gb_per_s"),
                        *wait = cJSON_GetObjectItem(row, "checkpoint_wait_s");
            assert_true(cJSON_IsNumber(stall) && stall->valuedouble >= 0);
            assert_true(cJSON_IsNumber(wait) && wait->valuedouble <= stall->valuedouble);
            assert_true(cJSON_IsNumber(w) && w->valuedouble > 0);
            assert_true(cJSON_IsNumber(b) && b->valuedouble > 10000); /* the tiny model's state */
            assert_true(cJSON_IsNumber(g) && g->valuedouble > 0);
            if (n < max) {
                waits[n] = wait->valuedouble;
                steps[n++] = (long long)cJSON_GetObjectItem(row, "step")->valuedouble;
            }
        }
        cJSON_Delete(row);
    }
    free(text);
    return n;
}

/* A checkpoint written in the background holds what a synchronous save of the same step holds,
 * bit for bit: the snapshot (on a GPU: the weights and moments copied into pinned memory by
 * queued copies) is what the writer writes, although training goes on meanwhile (each writer is
 * held back 300 ms, so the next steps run before it writes). Each save has a metrics row and a
 * console line with its stall (the wait for a write in it) and write time. */
static void async_equals_sync(const char *device) {
    char cfg[256], out_a[256], out_s[256];
    snprintf(cfg, sizeof cfg, "%s/train_%s.json", tmp, device);
    snprintf(out_a, sizeof out_a, "%s/async_%s", tmp, device);
    snprintf(out_s, sizeof out_s, "%s/sync_%s", tmp, device);
    setenv("ZAYAC_CKPT_DELAY_MS", "300", 1);
    run_result r = spawn_capture(bin, tmp,
                                 (const char *const[]){"train", "--config", cfg, "--out", out_a,
                                                       "--set", "checkpoint_interval=2", NULL});
    unsetenv("ZAYAC_CKPT_DELAY_MS");
    if (r.code != 0 || !strstr(r.out, "checkpoint step 2: stall") ||
        !strstr(r.out, "in the background"))
        fail_msg("background saves on %s: exit %d:\n%s\n%s", device, r.code, r.out, r.err);
    result_free(&r);
    RUN_OK("train", "--config", cfg, "--out", out_s, "--set", "checkpoint_interval=2", "--set",
           "checkpoint_async=false");
    for (int step = 4; step <= 8; step += 2) { /* the three kept */
        char da[400], ds[400], why[2048];
        snprintf(da, sizeof da, "%s/checkpoints/step_%09d", out_a, step);
        snprintf(ds, sizeof ds, "%s/checkpoints/step_%09d", out_s, step);
        int tensors;
        const int d = ckpt_compare(da, ds, &tensors, why, sizeof why);
        if (d != 0)
            fail_msg("step %d, background vs synchronous: %d differences:\n%s", step, d, why);
        assert_true(tensors > 20);
    }
    for (int k = 0; k < 2; k++) {
        long long steps[8];
        double waits[8];
        assert_int_equal(checkpoint_rows(k ? out_s : out_a, steps, waits, 8), 4);
        for (int i = 0; i < 4; i++) assert_int_equal(steps[i], 2 * (i + 1));
        /* training waits for every synchronous write; for the last background one the run does,
         * not the training */
        for (int i = 0; i < 4 && k == 1; i++) assert_true(waits[i] > 0);
        if (k == 0) assert_true(waits[3] == 0);
    }
}

static void test_background_save_equals_sync(void **state) {
    (void)state;
    async_equals_sync("cpu");
}

static void test_background_save_equals_sync_gpu(void **state) {
    (void)state;
    if (ops_cuda_device_count() == 0) skip();
    async_equals_sync("cuda");
}

/* Step rows (with a loss) of a run's metrics.jsonl: its steps done (0 while it does not exist). */
static int step_rows(const char *out) {
    char p[512], *text;
    snprintf(p, sizeof p, "%s/metrics.jsonl", out);
    if (zy_read_file(p, &text, NULL) != ZY_OK) return 0;
    int n = 0;
    for (const char *c = text, *nl; (nl = strchr(c, '\n')) != NULL; c = nl + 1) {
        const char *l = strstr(c, "\"loss\":");
        n += l && l < nl;
    }
    free(text);
    return n;
}

/* SIGTERM (a preemption) lets the current step finish, writes a checkpoint of it and exits 3; a
 * --resume then continues exactly as a run that was never stopped. */
static void test_sigterm_checkpoints_and_exits_3(void **state) {
    (void)state;
    char cfg[256], out_s[256], out_t[256], p[512];
    path(cfg, sizeof cfg, "train_cpu.json");
    path(out_s, sizeof out_s, "sig");
    path(out_t, sizeof out_t, "sig_straight");
    const char *argv[] = {bin,        "train",
                          "--config", cfg,
                          "--out",    out_s,
                          "--steps",  "100000",
                          "--set",    "eval_interval=0",
                          "--set",    "checkpoint_interval=0",
                          NULL};
    char log[512];
    snprintf(log, sizeof log, "%s/sig_stdout.txt", tmp);
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log, O_WRONLY | O_CREAT | O_TRUNC, 0644);
    pid_t pid;
    assert_int_equal(posix_spawn(&pid, bin, &fa, NULL, (char *const *)argv, environ), 0);
    posix_spawn_file_actions_destroy(&fa);
    for (int i = 0; i < 600 && step_rows(out_s) < 3; i++) usleep(100000);
    assert_true(step_rows(out_s) >= 3);
    assert_int_equal(kill(pid, SIGTERM), 0);
    int status;
    assert_int_equal(waitpid(pid, &status, 0), pid);
    char *text;
    assert_int_equal(zy_read_file(log, &text, NULL), ZY_OK);
    if (!WIFEXITED(status) || WEXITSTATUS(status) != 3)
        fail_msg("SIGTERM: status 0x%x, expected exit 3:\n%s", status, text);
    assert_non_null(strstr(text, "stopped on request"));
    free(text);
    const int stopped_at = step_rows(out_s); /* one row per completed step */
    snprintf(p, sizeof p, "%s/checkpoints/step_%09d/train/state.json", out_s, stopped_at);
    assert_true(zy_path_exists(p));
    /* two more steps after the resume == the same steps of a run never stopped */
    char n_straight[16];
    snprintf(n_straight, sizeof n_straight, "%d", stopped_at + 2);
    RUN_STOPPED("train", "--config", cfg, "--out", out_s, "--steps", "100000", "--set",
                "eval_interval=0", "--set", "checkpoint_interval=0", "--resume", "--stop-after",
                "2");
    RUN_STOPPED("train", "--config", cfg, "--out", out_t, "--steps", "100000", "--set",
                "eval_interval=0", "--set", "checkpoint_interval=0", "--stop-after", n_straight);
    char *ls = losses("sig"), *lt = losses("sig_straight");
    assert_string_equal(ls, lt);
    free(ls);
    free(lt);
}

/* Training keeps every layer's skip-class balancing bias at exactly -1 (the routing depends only on
 * bias differences; transformers resets that bias to -1 on load), while the other classes move. */
static void test_trained_skip_bias_is_canonical(void **state) {
    (void)state;
    char cfg[256], out_c[256], p[512];
    path(cfg, sizeof cfg, "train_cpu.json");
    path(out_c, sizeof out_c, "canon");
    RUN_OK("train", "--config", cfg, "--out", out_c);
    snprintf(p, sizeof p, "%s/checkpoints/step_000000008/model/model.safetensors", out_c);
    zy_safetensors st;
    assert_int_equal(safetensors_open(&st, p), ZY_OK);
    for (int l = 0; l < 2; l++) {
        char name[96];
        float b[4];
        snprintf(name, sizeof name, "model.layers.%d.mlp.gate.balancing_biases", l);
        assert_int_equal(safetensors_read_f32(&st, name, 1, (int64_t[]){4}, b), ZY_OK);
        assert_true(b[3] == -1.0f);
        assert_true(b[0] != 0.0f || b[1] != 0.0f || b[2] != 0.0f); /* the controller ran */
    }
    safetensors_close(&st);
}

/* A model config asking for attention dropout is refused at training time (zayac has none). */
static void test_attention_dropout_refused(void **state) {
    (void)state;
    char cfg[256], out_c[256];
    path(cfg, sizeof cfg, "train_cpu.json");
    path(out_c, sizeof out_c, "dropout");
    run_result r =
        spawn_capture(bin, tmp,
                      (const char *const[]){"train", "--config", cfg, "--out", out_c, "--set",
                                            "model.attention_dropout=0.1", NULL});
    if (r.code != 2)
        fail_msg("training with attention_dropout 0.1: exit %d, not 2:\n%s", r.code, r.out);
    assert_non_null(strstr(r.err, "attention_dropout = 0.1"));
    result_free(&r);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_trained_skip_bias_is_canonical),
        cmocka_unit_test(test_attention_dropout_refused),
        cmocka_unit_test(test_resume_is_exact),
        cmocka_unit_test(test_resume_skips_corrupt),
        cmocka_unit_test(test_out_dir_holds_a_run),
        cmocka_unit_test(test_resume_with_none_verifying),
        cmocka_unit_test(test_state_json_checked),
        cmocka_unit_test(test_background_saves),
        cmocka_unit_test(test_background_save_equals_sync),
        cmocka_unit_test(test_sigterm_checkpoints_and_exits_3),
        cmocka_unit_test(test_resume_is_exact_gpu),
        cmocka_unit_test(test_resume_is_exact_bf16_moments),
        cmocka_unit_test(test_gpu_tracks_cpu),
        cmocka_unit_test(test_background_save_equals_sync_gpu),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
