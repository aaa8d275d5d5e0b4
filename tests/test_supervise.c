/* The supervisor and the fault-injection suite (issue 18), end to end through the CLI on 2 CPU
 * ranks: each injected fault (kill, exit, hang, nan, spike, corrupt-checkpoint, enospc) under
 * `zayac supervise -- zayac launch --cpu -n 2 -- zayac train` ends with every step trained on the
 * loss curve of an undisturbed 2-rank run (reference: plain `mpirun -n 2 zayac train`, relative
 * difference <= 1e-6), every checkpoint the run completed on disk and verifying, and the incident
 * in incidents.jsonl; --hang-timeout 5 acts within a few seconds; bad input stops without a
 * retry; SIGTERM to the supervisor saves and exits 3. Skips without MPI or mpirun. Also the
 * loss-spike detector itself (train/spike.h): where it fires, and that its running mean survives
 * a resume exactly (one process, no MPI needed). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/timer.h"
#include "dist/comm.h"
#include "io/checkpoint.h"
#include "train/spike.h"
#include "corpus_util.h"
#include "mpi_test_util.h"
#include "spawn_util.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

enum { STEPS = 8 };

static char tmp[64];
static const char *bin;
static char mpirun[512];
static double reference[STEPS];

static void path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", tmp, name);
}

static int have_mpi(void) {
    return comm_have_mpi() && mpirun[0];
}

static const char *config_json =
    "{\"model\": {\"model_type\": \"zaya\", \"vocab_size\": 320, \"hidden_size\": 32,"
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
    " \"head_dim\": 32, \"num_experts\": 3, \"moe_intermediate_size\": 16,"
    " \"router_hidden_size\": 8, \"max_position_embeddings\": 64},"
    " \"tokenizer\": \"%s/tok.json\", \"data\": \"%s/data\", \"batch_size\": 4, \"seq_len\": 16,"
    " \"grad_accum\": 1, \"steps\": 8, \"eval_interval\": 0, \"checkpoint_interval\": 2,"
    " \"keep_checkpoints\": 10, \"log_interval\": 1, \"seed\": 5, \"device\": \"cpu\","
    " \"dist\": {\"timeout_s\": 120},"
    " \"optimizer\": {\"name\": \"muon\", \"lr\": 0.01}, \"schedule\": {\"warmup\": 2}}";

/* The loss of each step of a run's metrics.jsonl, the last row of a step winning (a restarted run
 * writes the steps it redoes again). Returns the number of steps 1..STEPS that have a loss. */
static int step_losses(const char *out, double *loss) {
    char p[512], *text;
    snprintf(p, sizeof p, "%s/metrics.jsonl", out);
    if (zy_read_file(p, &text, NULL) != ZY_OK) fail_msg("%s", zy_errmsg());
    for (int i = 0; i < STEPS; i++) loss[i] = NAN;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *row = cJSON_Parse(line);
        cJSON *step = cJSON_GetObjectItem(row, "step"), *l = cJSON_GetObjectItem(row, "loss");
        if (cJSON_IsNumber(step) && cJSON_IsNumber(l) && step->valueint >= 1 &&
            step->valueint <= STEPS)
            loss[step->valueint - 1] = l->valuedouble;
        cJSON_Delete(row);
    }
    free(text);
    int n = 0;
    for (int i = 0; i < STEPS; i++) n += !isnan(loss[i]);
    return n;
}

static int setup(void **state) {
    (void)state;
    bin = getenv("ZAYAC_BIN");
    if (!bin) bin = "build/zayac";
    mpi_test_env();
    if (!mpi_test_find_mpirun(mpirun, sizeof mpirun)) mpirun[0] = 0;
    snprintf(tmp, sizeof tmp, "/tmp/zy_super_XXXXXX");
    assert_non_null(mkdtemp(tmp));
    char corpus[256], tok[256], data[256], cfg[256], text[2048], out[256];
    path(corpus, sizeof corpus, "corpus.txt");
    assert_int_equal(corpus_write(corpus, 11, 160, 16), 0);
    path(tok, sizeof tok, "tok.json");
    path(data, sizeof data, "data");
    assert_int_equal(corpus_tokenize(bin, tmp, corpus, "320", "0.1", tok, data), 0);
    path(cfg, sizeof cfg, "train.json");
    snprintf(text, sizeof text, config_json, tmp, tmp);
    assert_int_equal(zy_write_file_atomic(cfg, text, strlen(text)), ZY_OK);
    if (!have_mpi()) return 0;
    /* the undisturbed reference: plain mpirun, no supervisor */
    path(out, sizeof out, "reference");
    run_result r = spawn_capture(mpirun, tmp,
                                 (const char *const[]){"--oversubscribe", "-n", "2", bin, "train",
                                                       "--config", cfg, "--out", out, NULL});
    if (r.code != 0) fail_msg("reference run: exit %d\n%s", r.code, r.err);
    result_free(&r);
    assert_int_equal(step_losses(out, reference), STEPS);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    if (!getenv("ZY_KEEP_TMP")) zy_remove_tree(tmp); /* kept for a look when asked */
    return 0;
}

/* `zayac supervise [options] -- zayac launch --cpu -n RANKS -- zayac train ... --out OUT [extra]`
 * with ZAYAC_FAULT=fault (NULL: none). */
static run_result supervise(const char *run, const char *fault, int ranks,
                            const char *const *options, const char *const *extra) {
    char out[256], cfg[256], n[16];
    path(out, sizeof out, run);
    path(cfg, sizeof cfg, "train.json");
    snprintf(n, sizeof n, "%d", ranks);
    const char *args[48];
    int k = 0;
    args[k++] = "supervise";
    args[k++] = "--backoff", args[k++] = "0";
    for (; options && *options; options++) args[k++] = *options;
    args[k++] = "--", args[k++] = bin, args[k++] = "launch", args[k++] = "--cpu";
    args[k++] = "-n", args[k++] = n, args[k++] = "--", args[k++] = bin, args[k++] = "train";
    args[k++] = "--config", args[k++] = cfg, args[k++] = "--out", args[k++] = out;
    for (; extra && *extra; extra++) args[k++] = *extra;
    args[k] = NULL;
    if (fault) setenv("ZAYAC_FAULT", fault, 1);
    run_result r = spawn_capture(bin, tmp, args);
    unsetenv("ZAYAC_FAULT");
    return r;
}

/* Whether a run's incidents.jsonl holds the text. */
static int incidents_mention(const char *run, const char *needle) {
    char p[512], *text;
    snprintf(p, sizeof p, "%s/%s/incidents.jsonl", tmp, run);
    if (zy_read_file(p, &text, NULL) != ZY_OK) fail_msg("%s", zy_errmsg());
    const int found = strstr(text, needle) != NULL;
    free(text);
    return found;
}

/* The incident rows of a run with the given kind (all their fields checked by the callers). */
static int incidents_of(const char *run, const char *kind, cJSON **first) {
    char p[512], *text;
    snprintf(p, sizeof p, "%s/%s/incidents.jsonl", tmp, run);
    if (zy_read_file(p, &text, NULL) != ZY_OK) return 0;
    int n = 0;
    *first = NULL;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        cJSON *row = cJSON_Parse(line);
        cJSON *k = cJSON_GetObjectItem(row, "kind");
        if (row && cJSON_IsString(k) && !strcmp(k->valuestring, kind) && n++ == 0)
            *first = row;
        else
            cJSON_Delete(row);
    }
    free(text);
    return n;
}

static double number(const cJSON *row, const char *key) {
    const cJSON *v = cJSON_GetObjectItem(row, key);
    if (!cJSON_IsNumber(v)) fail_msg("incident without a number %s", key);
    return v->valuedouble;
}

/* Every checkpoint of steps 2, 4, 6, 8 is there and verifies (sizes and CRC-32C of every file). */
static void all_checkpoints_verify(const char *run) {
    for (int s = 2; s <= STEPS; s += 2) {
        char ck[512];
        snprintf(ck, sizeof ck, "%s/%s/checkpoints/step_%09d", tmp, run, s);
        if (ckpt_verify(ck) != ZY_OK) fail_msg("%s: step %d: %s", run, s, zy_errmsg());
    }
}

/* A fault under the supervisor: exit 0, the reference curve, the checkpoints, one incident of
 * `kind` whose action was a restart, with a measured downtime; returns its row. */
static cJSON *recovers(const char *run, const char *fault, const char *kind,
                       const char *const *options, const char *const *extra) {
    run_result r = supervise(run, fault, 2, options, extra);
    if (r.code != 0) fail_msg("%s: supervise exit %d\n%s\n%s", fault, r.code, r.out, r.err);
    if (!strstr(r.out, "goodput")) fail_msg("%s: no summary in:\n%s", fault, r.out);
    result_free(&r);
    char out[256];
    path(out, sizeof out, run);
    double loss[STEPS];
    assert_int_equal(step_losses(out, loss), STEPS);
    double worst = 0;
    for (int i = 0; i < STEPS; i++) {
        const double rel = fabs(loss[i] - reference[i]) / fabs(reference[i]);
        if (rel > worst) worst = rel;
    }
    all_checkpoints_verify(run);
    cJSON *row;
    const int n = incidents_of(run, kind, &row);
    if (n != 1) fail_msg("%s: %d incidents of kind %s", fault, n, kind);
    const cJSON *action = cJSON_GetObjectItem(row, "action");
    assert_string_equal(action->valuestring, "restart");
    const double downtime = number(row, "downtime_s");
    const double detected = number(row, "detected_after_s");
    const double redone = number(row, "steps_redone");
    print_message("%-40s worst relative loss difference %.2g; detected after %.2f s, downtime "
                  "%.2f s, %g steps redone\n",
                  fault, worst, detected, downtime, redone);
    assert_true(worst <= 1e-6);
    assert_true(downtime > 0 && downtime < 60);
    assert_true(detected >= 0 && detected <= downtime); /* both from the fault's announcement */
    assert_true(redone >= 0);
    return row;
}

/* The restart resumed from a checkpoint of the failed run (a save still being written when the
 * rank died is not one) and redid the steps after it. */
static void resumed_consistently(const cJSON *row) {
    const int step = (int)number(row, "step"), from = (int)number(row, "resumed_from_step");
    assert_true(from >= 0 && from <= step && from % 2 == 0);
    assert_int_equal((int)number(row, "steps_redone"), step - from);
}

static void test_kill(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    cJSON *row = recovers("kill", "kill:rank=1:step=5", "crash", NULL, NULL);
    assert_int_equal((int)number(row, "rank"), 1);
    assert_int_equal((int)number(row, "step"), 4); /* the last step it completed */
    assert_int_equal((int)number(row, "status"), 128 + SIGKILL);
    assert_string_equal(cJSON_GetObjectItem(row, "fault")->valuestring, "kill on rank 1 at step 5");
    resumed_consistently(row);
    cJSON_Delete(row);
}

static void test_exit(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    cJSON *row = recovers("exit", "exit:rank=0:step=6", "exit", NULL, NULL);
    assert_int_equal((int)number(row, "rank"), 0);
    assert_int_equal((int)number(row, "status"), 1);
    assert_int_equal((int)number(row, "step"), 5);
    resumed_consistently(row);
    cJSON_Delete(row);
}

/* A rank that stops making progress: the supervisor sees no heartbeat for 5 s (the job's own
 * collective timeout is 120 s), ends the whole job and resumes. */
static void test_hang(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    const double t0 = zy_now();
    cJSON *row = recovers("hang", "hang:rank=1:step=3", "hang",
                          (const char *const[]){"--hang-timeout", "5", NULL}, NULL);
    const double took = zy_now() - t0;
    print_message("hang: the supervised run took %.1f s in all\n", took);
    assert_true(took < 100); /* far below the 120 s the job's collectives would wait */
    /* the detection itself: the hang was declared after 5 s and within a few more */
    const double downtime = number(row, "downtime_s"), detected = number(row, "detected_after_s");
    assert_true(detected >= 5 && detected < 15);
    assert_true(downtime >= 5 && downtime < 30);
    cJSON_Delete(row);
    char p[400];
    snprintf(p, sizeof p, "pgrep -f '%s/han[g]' > /dev/null", tmp); /* [g]: not pgrep's shell */
    assert_int_not_equal(system(p), 0); /* nothing of the hung job left running */
}

static void test_nan(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    cJSON *row = recovers("nan", "nan:rank=1:step=5", "divergence", NULL, NULL);
    assert_int_equal((int)number(row, "step"), 5); /* the step that diverged */
    const int from = (int)number(row, "resumed_from_step");
    assert_int_equal((int)number(row, "steps_redone"), 4 - from);
    cJSON_Delete(row);
}

/* The loss-spike detector: past its warmup it fires on a loss above factor x the running mean and
 * not on one below; a spike does not join the mean; the warmup and factor 0 never fire. */
static void test_spike_detector_threshold(void **state) {
    (void)state;
    char why[160];
    zy_spike s;
    spike_init(&s, &(zy_spike_config){.factor = 2, .warmup = 3, .decay = 0.5f});
    for (int i = 0; i < 3; i++) assert_int_equal(spike_check(&s, 4.0, why, sizeof why), 0);
    assert_true(s.mean == 4.0);                                  /* threshold 8 */
    assert_int_equal(spike_check(&s, 7.99, why, sizeof why), 0); /* below: joins the mean */
    assert_true(fabs(s.mean - 5.995) < 1e-12);                   /* threshold 11.99 */
    assert_int_equal(spike_check(&s, 12.0, why, sizeof why), 1); /* above */
    assert_non_null(strstr(why, "loss spike"));
    assert_non_null(strstr(why, "threshold 11.99"));
    assert_true(fabs(s.mean - 5.995) < 1e-12); /* the spike left the mean alone */
    assert_int_equal(spike_check(&s, 11.98, why, sizeof why), 0);
    assert_int_equal(spike_check(&s, NAN, why, sizeof why), 0); /* the NaN check's, not here */
    assert_int_equal((int)s.seen, 5);
    /* within the warmup, or with factor 0, even a loss 100 times the mean passes */
    spike_init(&s, &(zy_spike_config){.factor = 2, .warmup = 3, .decay = 0.5f});
    assert_int_equal(spike_check(&s, 4.0, why, sizeof why), 0);
    assert_int_equal(spike_check(&s, 400.0, why, sizeof why), 0);
    spike_init(&s, &(zy_spike_config){.factor = 0, .warmup = 0, .decay = 0.5f});
    assert_int_equal(spike_check(&s, 4.0, why, sizeof why), 0);
    assert_int_equal(spike_check(&s, 400.0, why, sizeof why), 0);
}

/* The "loss_spike" record of the newest checkpoint of a run (its mean and step count). */
static void spike_record(const char *run, int step, double *mean, double *steps) {
    char p[512], *text;
    snprintf(p, sizeof p, "%s/%s/checkpoints/step_%09d/train/state.json", tmp, run, step);
    if (zy_read_file(p, &text, NULL) != ZY_OK) fail_msg("%s", zy_errmsg());
    cJSON *st = cJSON_Parse(text);
    free(text);
    const cJSON *o = cJSON_GetObjectItem(st, "loss_spike");
    if (!o) fail_msg("%s: no loss_spike", p);
    *mean = number(o, "mean");
    *steps = number(o, "steps");
    cJSON_Delete(st);
}

/* The running mean is in every checkpoint: a run stopped after 3 steps and resumed ends with the
 * mean of an uninterrupted run, to the bit (a resume that started the mean again would hold the
 * mean of steps 4..8 only, over 5 steps). One process: no MPI needed. */
static void test_spike_mean_survives_resume(void **state) {
    (void)state;
    char cfg[256], whole[256], parts[256];
    path(cfg, sizeof cfg, "train.json");
    path(whole, sizeof whole, "spike_whole");
    path(parts, sizeof parts, "spike_parts");
    const char *set = "spike.factor=3";
    run_result r = spawn_capture(
        bin, tmp,
        (const char *const[]){"train", "--config", cfg, "--out", whole, "--set", set, NULL});
    if (r.code != 0) fail_msg("uninterrupted: exit %d\n%s", r.code, r.err);
    result_free(&r);
    r = spawn_capture(bin, tmp,
                      (const char *const[]){"train", "--config", cfg, "--out", parts, "--set", set,
                                            "--stop-after", "3", NULL});
    if (r.code != 3) fail_msg("stop after 3: exit %d\n%s", r.code, r.err);
    result_free(&r);
    r = spawn_capture(bin, tmp,
                      (const char *const[]){"train", "--config", cfg, "--out", parts, "--set", set,
                                            "--resume", NULL});
    if (r.code != 0) fail_msg("resumed: exit %d\n%s", r.code, r.err);
    assert_non_null(strstr(r.out, "(step 3)"));
    result_free(&r);
    double m1, n1, m2, n2;
    spike_record("spike_whole", STEPS, &m1, &n1);
    spike_record("spike_parts", STEPS, &m2, &n2);
    print_message("loss-spike mean after %d steps: %.17g uninterrupted, %.17g resumed at 3\n",
                  STEPS, m1, m2);
    assert_true(n1 == STEPS && n2 == STEPS);
    assert_true(m1 == m2);
}

/* A loss spike (rank 1's share of step 5's loss inflated, so the step's loss is about 100 times
 * the mean) under the supervisor with spike.factor 3: the step fails before its update, the run
 * rolls back and redoes it on the reference curve; the incident says "loss spike" with the loss
 * and the threshold. */
static void test_spike(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    cJSON *row =
        recovers("spike", "spike:rank=1:step=5", "loss-spike", NULL,
                 (const char *const[]){"--set", "spike.factor=3", "--set", "spike.warmup=2", NULL});
    assert_int_equal((int)number(row, "step"), 5); /* the step that spiked */
    const int from = (int)number(row, "resumed_from_step");
    assert_int_equal((int)number(row, "steps_redone"), 4 - from);
    const char *detail = cJSON_GetObjectItem(row, "detail")->valuestring;
    if (!strstr(detail, "loss spike: loss ") || !strstr(detail, "threshold "))
        fail_msg("detail: %s", detail);
    cJSON_Delete(row);
}

/* The checkpoint of step 4 is damaged after it is written, then a rank is killed at step 6: the
 * restart skips the damaged one and resumes from step 2 (steps 3..5 redone). Saves are
 * synchronous here, so the damage is done before the kill. */
static void test_corrupt_checkpoint(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    cJSON *row = recovers("corrupt", "corrupt-checkpoint:step=4,kill:rank=1:step=6", "crash", NULL,
                          (const char *const[]){"--set", "checkpoint_async=false", NULL});
    assert_int_equal((int)number(row, "resumed_from_step"), 2);
    assert_int_equal((int)number(row, "steps_redone"), 3);
    cJSON_Delete(row);
    cJSON *c;
    assert_int_equal(incidents_of("corrupt", "corrupt-checkpoint", &c), 1);
    cJSON_Delete(c);
}

/* The last save fails as on a full disk: the run exits 1, the restart resumes from step 6. */
static void test_enospc(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    cJSON *row = recovers("enospc", "enospc:rank=1:step=8", "exit", NULL, NULL);
    assert_int_equal((int)number(row, "resumed_from_step"), 6);
    assert_int_equal((int)number(row, "steps_redone"), 2);
    cJSON_Delete(row);
}

/* Bad input (a global batch of 4 over 3 ranks) is not retried: exit 2, one incident. */
static void test_bad_input_stops(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    run_result r = supervise("bad", NULL, 3, NULL, NULL);
    if (r.code != 2) fail_msg("exit %d\n%s", r.code, r.err);
    assert_null(strstr(r.err, "restart 1"));
    result_free(&r);
    cJSON *row;
    assert_int_equal(incidents_of("bad", "bad-input", &row), 1);
    assert_string_equal(cJSON_GetObjectItem(row, "action")->valuestring, "stop");
    cJSON_Delete(row);
}

/* The same step diverging again after the rollback (the fault listed twice fires in two runs):
 * the third run skips that step's batch. Steps before it keep the reference curve; from it on the
 * curve is that of a plain run told to skip the batch (ZAYAC_SKIP_STEPS), which differs from the
 * reference at that step. */
static void test_repeated_divergence_skips_the_batch(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    run_result r = supervise("skip", "nan:rank=0:step=5,nan:rank=0:step=5", 2, NULL, NULL);
    if (r.code != 0) fail_msg("exit %d\n%s\n%s", r.code, r.out, r.err);
    result_free(&r);
    cJSON *row;
    assert_int_equal(incidents_of("skip", "divergence", &row), 2);
    cJSON_Delete(row);
    assert_true(incidents_mention("skip", "\"action\":\"skip-batch\""));
    char out[256], cfg[256];
    path(out, sizeof out, "skip_plain");
    path(cfg, sizeof cfg, "train.json");
    setenv("ZAYAC_SKIP_STEPS", "5", 1);
    r = spawn_capture(mpirun, tmp,
                      (const char *const[]){"--oversubscribe", "-n", "2", bin, "train", "--config",
                                            cfg, "--out", out, NULL});
    unsetenv("ZAYAC_SKIP_STEPS");
    if (r.code != 0) fail_msg("plain run skipping step 5: exit %d\n%s", r.code, r.err);
    result_free(&r);
    double skipped[STEPS], plain[STEPS];
    path(out, sizeof out, "skip");
    assert_int_equal(step_losses(out, skipped), STEPS);
    path(out, sizeof out, "skip_plain");
    assert_int_equal(step_losses(out, plain), STEPS);
    for (int i = 0; i < STEPS; i++) {
        const double want = i < 4 ? reference[i] : plain[i];
        if (fabs(skipped[i] - want) > 1e-6 * fabs(want))
            fail_msg("step %d: %.9g, expected %.9g", i + 1, skipped[i], want);
    }
    assert_true(fabs(plain[4] - reference[4]) > 1e-6 * fabs(reference[4])); /* it did skip */
}

/* Rank 1 failing twice in a row: the run goes on with 1 rank (the largest count below 2 that
 * divides the batch of 4), from the checkpoint the 2 ranks wrote; the curve stays the reference's
 * to reduction-order noise (1 and 2 ranks sum the gradients in different orders). */
static void test_failing_rank_means_fewer_ranks(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    run_result r = supervise("fewer", "kill:rank=1:step=3,kill:rank=1:step=5", 2, NULL, NULL);
    if (r.code != 0) fail_msg("exit %d\n%s\n%s", r.code, r.out, r.err);
    result_free(&r);
    cJSON *row;
    assert_int_equal(incidents_of("fewer", "crash", &row), 2);
    cJSON_Delete(row);
    assert_true(incidents_mention("fewer", "restarting on 1 of 2 ranks"));
    char out[256], world[128];
    path(out, sizeof out, "fewer");
    double loss[STEPS];
    assert_int_equal(step_losses(out, loss), STEPS);
    double worst = 0;
    for (int i = 0; i < STEPS; i++)
        worst = fmax(worst, fabs(loss[i] - reference[i]) / fabs(reference[i]));
    print_message("2 -> 1 ranks after rank 1 failed twice: worst relative loss difference %.2g\n",
                  worst);
    assert_true(worst <= 1e-4);
    char p[512], *text;
    snprintf(p, sizeof p, "%s/metrics.jsonl", out);
    assert_int_equal(zy_read_file(p, &text, NULL), ZY_OK);
    snprintf(world, sizeof world, "{\"step\":%d,", STEPS);
    const char *last = NULL; /* the last row of the last step: the run that finished */
    for (const char *at = text; (at = strstr(at, world)) != NULL; at++) last = at;
    assert_non_null(last);
    const char *w = strstr(last, "\"world_size\":");
    assert_non_null(w);
    assert_int_equal(atoi(w + strlen("\"world_size\":")), 1);
    free(text);
}

/* The same two failures, further apart than --rank-failure-window: not a bad rank but two
 * unrelated failures (in a month-long run a rank failing on day 2 and on day 9 is no reason to
 * drop a GPU), so both are plain restarts on 2 ranks. */
static void test_rank_failures_far_apart_keep_the_ranks(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    run_result r = supervise("apart", "kill:rank=1:step=3,kill:rank=1:step=5", 2,
                             (const char *const[]){"--rank-failure-window", "0", NULL}, NULL);
    if (r.code != 0) fail_msg("exit %d\n%s\n%s", r.code, r.out, r.err);
    result_free(&r);
    assert_false(incidents_mention("apart", "fewer-ranks"));
    cJSON *row;
    assert_int_equal(incidents_of("apart", "crash", &row), 2);
    assert_string_equal(cJSON_GetObjectItem(row, "action")->valuestring, "restart");
    cJSON_Delete(row);
}

/* --max-restarts bounds the restarts that get no further, not all of them: three failures, each
 * past the one before, with --max-restarts 1 still finish the run (a long run that fails now
 * and then must not give up), while a command that fails at the same point again gives up after
 * one restart with exit 1. */
static void test_max_restarts_counts_restarts_without_progress(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    run_result r = supervise("moving", "kill:rank=1:step=3,kill:rank=0:step=5,kill:rank=1:step=7",
                             2, (const char *const[]){"--max-restarts", "1", NULL}, NULL);
    if (r.code != 0) fail_msg("exit %d\n%s\n%s", r.code, r.out, r.err);
    result_free(&r);
    cJSON *row;
    assert_int_equal(incidents_of("moving", "crash", &row), 3);
    cJSON_Delete(row);
    char out[256];
    path(out, sizeof out, "stuck");
    r = spawn_capture(bin, tmp,
                      (const char *const[]){"supervise", "--out", out, "--backoff", "0",
                                            "--max-restarts", "1", "--", "false", NULL});
    assert_int_equal(r.code, 1);
    result_free(&r);
    assert_int_equal(incidents_of("stuck", "exit", &row), 2);
    cJSON_Delete(row);
    assert_true(incidents_mention("stuck", "give-up"));
}

/* One process without a launcher (its stdout a pipe, so block-buffered, and the progress lines
 * rare): the restart is still accounted from the checkpoint it resumed from. The 2-GPU drill
 * recorded "resumed from step 0" when the first heartbeat came before the buffered "resumed from"
 * line; the heartbeat now carries the step the run started from. */
static void test_resume_step_without_launcher(void **state) {
    (void)state;
    char out[256], cfg[256];
    path(out, sizeof out, "plain");
    path(cfg, sizeof cfg, "train.json");
    setenv("ZAYAC_FAULT", "kill:rank=0:step=5", 1);
    run_result r = spawn_capture(bin, tmp,
                                 (const char *const[]){"supervise", "--backoff", "0", "--", bin,
                                                       "train", "--config", cfg, "--out", out,
                                                       "--set", "log_interval=100", "--set",
                                                       "checkpoint_async=false", NULL});
    unsetenv("ZAYAC_FAULT");
    if (r.code != 0) fail_msg("exit %d\n%s\n%s", r.code, r.out, r.err);
    result_free(&r);
    cJSON *row;
    assert_int_equal(incidents_of("plain", "crash", &row), 1);
    assert_int_equal((int)number(row, "step"), 4);
    /* the step-4 checkpoint (written before step 5 began: checkpoint_async off) */
    assert_int_equal((int)number(row, "resumed_from_step"), 4);
    assert_int_equal((int)number(row, "steps_redone"), 0);
    cJSON_Delete(row);
}

/* SIGTERM to the supervisor reaches the ranks through the launcher: they save and exit 3, so does
 * the supervisor, and nothing is restarted. */
static void test_sigterm_stops(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    char out[256], cfg[256], capture[300];
    path(out, sizeof out, "term");
    path(cfg, sizeof cfg, "train.json");
    path(capture, sizeof capture, "term_stderr.txt");
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY),
            fe = open(capture, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fe, 2);
        execl(bin, bin, "supervise", "--backoff", "0", "--", bin, "launch", "--cpu", "-n", "2",
              "--", bin, "train", "--config", cfg, "--out", out, "--steps", "100000", "--set",
              "checkpoint_interval=0", (char *)NULL);
        _exit(127);
    }
    char hb[400];
    snprintf(hb, sizeof hb, "%s/.aegis/heartbeat/rank_0", out);
    for (int i = 0; i < 600 && !zy_path_exists(hb); i++) usleep(100000);
    assert_true(zy_path_exists(hb));
    kill(pid, SIGTERM);
    int status;
    const double t0 = zy_now();
    pid_t done = 0;
    while ((done = waitpid(pid, &status, WNOHANG)) == 0 && zy_now() - t0 < 60) usleep(100000);
    if (done == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        fail_msg("the supervisor still ran 60 s after SIGTERM");
    }
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 3);
    long long newest = -1;
    char root[300];
    snprintf(root, sizeof root, "%s/checkpoints", out);
    assert_true(ckpt_list(root, &newest) >= 1); /* the stop's checkpoint */
    char *text;
    assert_int_equal(zy_read_file(capture, &text, NULL), ZY_OK);
    assert_null(strstr(text, "restart 1"));
    free(text);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_kill),
        cmocka_unit_test(test_exit),
        cmocka_unit_test(test_hang),
        cmocka_unit_test(test_nan),
        cmocka_unit_test(test_spike),
        cmocka_unit_test(test_spike_detector_threshold),
        cmocka_unit_test(test_spike_mean_survives_resume),
        cmocka_unit_test(test_corrupt_checkpoint),
        cmocka_unit_test(test_enospc),
        cmocka_unit_test(test_bad_input_stops),
        cmocka_unit_test(test_repeated_divergence_skips_the_batch),
        cmocka_unit_test(test_failing_rank_means_fewer_ranks),
        cmocka_unit_test(test_resume_step_without_launcher),
        cmocka_unit_test(test_rank_failures_far_apart_keep_the_ranks),
        cmocka_unit_test(test_max_restarts_counts_restarts_without_progress),
        cmocka_unit_test(test_sigterm_stops),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
