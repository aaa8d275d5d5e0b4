/* Data-parallel training on CPU ranks over MPI, end to end through the CLI (`mpirun -n N zayac
 * train`): 1, 2 and 4 ranks train on the same tokens in the same order, so their loss curves agree
 * to reduction-order noise; a 2-rank run repeats bit for bit (with activation recomputation too)
 * and resumes exactly; the weights stay
 * identical on every rank (checked by the trainer at each checkpoint); a global batch the ranks
 * cannot split is bad input; a rank that dies ends the job. Skips without MPI or mpirun. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include <cjson/cJSON.h>
#include "base/fileio.h"
#include "base/rng.h"
#include "base/timer.h"
#include "dist/comm.h"
#include "io/safetensors.h"
#include "model/config.h"
#include "model/model.h"
#include "mpi_test_util.h"
#include "ckpt_compare.h"
#include "corpus_util.h"
#include "spawn_util.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tmp[64];
static const char *bin;
static char mpirun[512];

static void path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", tmp, name);
}

static int have_mpi(void) {
    return comm_have_mpi() && mpirun[0];
}

/* `mpirun -n N zayac train --config CFG --out OUT extra...` (N = 1: plain zayac train). */
static run_result train(int n, const char *out, const char *const *extra) {
    char cfg[256], nranks[16];
    path(cfg, sizeof cfg, "train.json");
    snprintf(nranks, sizeof nranks, "%d", n);
    const char *args[40];
    int k = 0;
    if (n > 1) {
        args[k++] = "--oversubscribe";
        args[k++] = "-n";
        args[k++] = nranks;
        args[k++] = bin;
    }
    args[k++] = "train";
    args[k++] = "--config";
    args[k++] = cfg;
    args[k++] = "--out";
    args[k++] = out;
    for (; extra && *extra; extra++) args[k++] = *extra;
    args[k] = NULL;
    return spawn_capture(n > 1 ? mpirun : bin, tmp, args);
}

static void train_ok(int n, const char *run, const char *const *extra) {
    char out[256];
    path(out, sizeof out, run);
    run_result r = train(n, out, extra);
    if (r.code != 0) fail_msg("%d ranks: exit %d\n%s\n%s", n, r.code, r.out, r.err);
    if (n > 1 && !strstr(r.out, "weights identical on all"))
        fail_msg("%d ranks: no replica check in:\n%s", n, r.out);
    result_free(&r);
}

/* A column of a run's metrics.jsonl step rows (those with a loss), and their world_size. */
static int step_column(const char *run, const char *key, double *v, int max, int *world) {
    char p[512], *text, quoted[64];
    snprintf(p, sizeof p, "%s/%s/metrics.jsonl", tmp, run);
    snprintf(quoted, sizeof quoted, "\"%s\":", key);
    if (zy_read_file(p, &text, NULL) != ZY_OK) fail_msg("%s", zy_errmsg());
    int n = 0;
    *world = -1;
    for (char *line = strtok(text, "\n"); line; line = strtok(NULL, "\n")) {
        const char *l = strstr(line, "\"loss\":"), *w = strstr(line, "\"world_size\":");
        const char *x = strstr(line, quoted);
        if (!l) continue;
        if (!w || !x) fail_msg("a step row without world_size or %s: %s", key, line);
        if (n < max) v[n++] = strtod(x + strlen(quoted), NULL);
        *world = atoi(w + 13);
    }
    free(text);
    return n;
}

static int losses(const char *run, double *loss, int max, int *world) {
    return step_column(run, "loss", loss, max, world);
}

/* The largest |a[i] - b[i]| / |b[i]| over n values. */
static double worst_relative(const double *a, const double *b, int n) {
    double worst = 0;
    for (int i = 0; i < n; i++) {
        double rel = fabs(a[i] - b[i]) / fabs(b[i]);
        if (rel > worst) worst = rel;
    }
    return worst;
}

/* Complete step rows (with a loss) of a running job's metrics.jsonl (0 while it does not exist):
 * its steps done. */
static int rows_written(const char *run) {
    char p[512], *text;
    snprintf(p, sizeof p, "%s/%s/metrics.jsonl", tmp, run);
    if (zy_read_file(p, &text, NULL) != ZY_OK) return 0;
    int n = 0;
    for (const char *c = text, *nl; (nl = strchr(c, '\n')) != NULL; c = nl + 1) {
        const char *l = strstr(c, "\"loss\":");
        n += l && l < nl;
    }
    free(text);
    return n;
}

static void write_corpus(void) {
    char p[256];
    path(p, sizeof p, "corpus.txt");
    assert_int_equal(corpus_write(p, 11, 160, 16), 0);
}

static const char *config_json =
    "{\"model\": {\"model_type\": \"zaya\", \"vocab_size\": 320, \"hidden_size\": 32,"
    " \"num_hidden_layers\": 2, \"num_attention_heads\": 4, \"num_key_value_heads\": 2,"
    " \"head_dim\": 32, \"num_experts\": 3, \"moe_intermediate_size\": 16,"
    " \"router_hidden_size\": 8, \"max_position_embeddings\": 64},"
    " \"tokenizer\": \"%s/tok.json\", \"data\": \"%s/data\", \"batch_size\": 4, \"seq_len\": 16,"
    " \"grad_accum\": 2, \"steps\": 8, \"eval_interval\": 4, \"eval_batches\": 2,"
    " \"checkpoint_interval\": 4, \"log_interval\": 1, \"seed\": 5, \"device\": \"cpu\","
    " \"optimizer\": {\"name\": \"muon\", \"lr\": 0.01}, \"schedule\": {\"warmup\": 2}}";

static int setup(void **state) {
    (void)state;
    bin = getenv("ZAYAC_BIN");
    if (!bin) bin = "build/zayac";
    mpi_test_env(); /* root and sanitizer settings mpirun and its ranks need */
    if (!mpi_test_find_mpirun(mpirun, sizeof mpirun)) mpirun[0] = 0;
    snprintf(tmp, sizeof tmp, "/tmp/zy_dp_XXXXXX");
    assert_non_null(mkdtemp(tmp));
    if (!have_mpi()) return 0;
    write_corpus();
    char corpus[256], tok[256], data[256], cfg[256], text[2048];
    path(corpus, sizeof corpus, "corpus.txt");
    path(tok, sizeof tok, "tok.json");
    path(data, sizeof data, "data");
    assert_int_equal(corpus_tokenize(bin, tmp, corpus, "320", "0.1", tok, data), 0);
    path(cfg, sizeof cfg, "train.json");
    snprintf(text, sizeof text, config_json, tmp, tmp);
    assert_int_equal(zy_write_file_atomic(cfg, text, strlen(text)), ZY_OK);
    return 0;
}

static int teardown(void **state) {
    (void)state;
    zy_remove_tree(tmp);
    return 0;
}

/* 1, 2 and 4 ranks read the same global batches: the same loss curve up to the order in which
 * the ranks' gradient sums are added; and the same gradient norms (each rank's gradient buckets,
 * reduced to their owners during the backward, must hold every rank's contribution: one tensor
 * reduced before its gradient is final shows here long before it moves the loss). */
static void test_ranks_match_one(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    enum { STEPS = 8 };
    double loss[3][STEPS], gnorm[3][STEPS];
    const int ranks[3] = {1, 2, 4};
    for (int i = 0; i < 3; i++) {
        char run[32];
        snprintf(run, sizeof run, "w%d", ranks[i]);
        train_ok(ranks[i], run, NULL);
        int world;
        assert_int_equal(losses(run, loss[i], STEPS, &world), STEPS);
        assert_int_equal(world, ranks[i]);
        assert_int_equal(step_column(run, "grad_norm", gnorm[i], STEPS, &world), STEPS);
    }
    double worst = 0, worst_norm = 0, norm;
    for (int i = 1; i < 3; i++) {
        if ((norm = worst_relative(gnorm[i], gnorm[0], STEPS)) > worst_norm) worst_norm = norm;
        if ((norm = worst_relative(loss[i], loss[0], STEPS)) > worst) worst = norm;
    }
    print_message("1 rank: loss %.6f -> %.6f; worst relative difference of 2 and 4 ranks: %.3g "
                  "(loss), %.3g (gradient norm)\n",
                  loss[0][0], loss[0][STEPS - 1], worst, worst_norm);
    assert_true(worst <= 1e-4);
    assert_true(worst_norm <= 1e-5);
    assert_true(loss[0][STEPS - 1] < loss[0][0]); /* it trained */
}

/* The same 2-rank run twice: the same bits; stopped at step 4 + resumed on 2 ranks: the same
 * bits as straight through; and with activation recomputation (the backward's second forward of
 * each layer while its gradients go to their owners): the same bits again. */
static void test_two_ranks_repeat_and_resume_exactly(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    train_ok(2, "a", NULL);
    train_ok(2, "b", NULL);
    train_ok(2, "r", (const char *const[]){"--set", "recompute=true", NULL});
    char out_c[256];
    path(out_c, sizeof out_c, "c");
    run_result r = train(2, out_c, (const char *const[]){"--stop-after", "4", NULL});
    if (r.code != 3) fail_msg("--stop-after on 2 ranks: exit %d\n%s\n%s", r.code, r.out, r.err);
    result_free(&r);
    train_ok(2, "c", (const char *const[]){"--resume", NULL});
    double la[8], lc[8];
    int w;
    assert_int_equal(losses("a", la, 8, &w), 8);
    assert_int_equal(losses("c", lc, 8, &w), 8);
    assert_memory_equal(la, lc, sizeof la);
    double lb[8];
    assert_int_equal(losses("b", lb, 8, &w), 8);
    assert_memory_equal(la, lb, sizeof la);
    double lr[8];
    assert_int_equal(losses("r", lr, 8, &w), 8);
    assert_memory_equal(la, lr, sizeof la);
    /* each rank wrote the weights it owns */
    for (int shard = 1; shard <= 2; shard++) {
        char ck[128], pa[512], pb[512], pc[512], pr[512];
        snprintf(ck, sizeof ck, "checkpoints/step_000000008/model/model-%05d-of-00002.safetensors",
                 shard);
        snprintf(pa, sizeof pa, "%s/a/%s", tmp, ck);
        snprintf(pb, sizeof pb, "%s/b/%s", tmp, ck);
        snprintf(pc, sizeof pc, "%s/c/%s", tmp, ck);
        snprintf(pr, sizeof pr, "%s/r/%s", tmp, ck);
        zy_mmap wa, wb, wc, wr;
        assert_int_equal(zy_mmap_open(&wa, pa), ZY_OK);
        assert_int_equal(zy_mmap_open(&wb, pb), ZY_OK);
        assert_int_equal(zy_mmap_open(&wc, pc), ZY_OK);
        assert_int_equal(zy_mmap_open(&wr, pr), ZY_OK);
        assert_int_equal(wa.size, wb.size);
        assert_int_equal(wa.size, wc.size);
        assert_int_equal(wa.size, wr.size);
        assert_memory_equal(wa.data, wb.data, wa.size);
        assert_memory_equal(wa.data, wc.data, wa.size);
        assert_memory_equal(wa.data, wr.data, wa.size);
        zy_mmap_close(&wa);
        zy_mmap_close(&wb);
        zy_mmap_close(&wc);
        zy_mmap_close(&wr);
    }
}

/* Optimizer state floats of a training-state file, and whether it holds name. */
static size_t state_floats(const char *path) {
    zy_safetensors f;
    if (safetensors_open(&f, path) != ZY_OK) fail_msg("%s", zy_errmsg());
    size_t n = 0;
    for (int i = 0; i < f.count; i++)
        if (strncmp(f.tensors[i].name, "balance", 7)) n += f.tensors[i].numel;
    safetensors_close(&f);
    return n;
}

/* ZeRO-1: on 2 ranks each rank keeps the optimizer state of its own tensors (the checkpoint holds
 * rank 0's file and rank 1's shard, about half each, together the whole 1-rank state), and a
 * checkpoint written by 2 ranks resumes on 1 and on 4 ranks (state found by global name) on the
 * curve of the uninterrupted run; so does a run moved 2 -> 1 -> 4 ranks. */
static void test_zero1_shards_and_reshapes(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    train_ok(1, "z_one", NULL);
    train_ok(2, "z_two", NULL);
    char p0[512], p1[512], pall[512];
    snprintf(p0, sizeof p0,
             "%s/z_two/checkpoints/step_000000008/train/train_state.rank_0.safetensors", tmp);
    snprintf(p1, sizeof p1,
             "%s/z_two/checkpoints/step_000000008/train/train_state.rank_1.safetensors", tmp);
    snprintf(pall, sizeof pall,
             "%s/z_one/checkpoints/step_000000008/train/train_state.rank_0.safetensors", tmp);
    const size_t s0 = state_floats(p0), s1 = state_floats(p1), all = state_floats(pall);
    print_message("optimizer state floats: 1 rank %zu; 2 ranks %zu + %zu\n", all, s0, s1);
    assert_int_equal(s0 + s1, all);
    assert_true(s0 > all / 4 && s1 > all / 4); /* both ranks hold a real share */
    /* the checkpoint's model/ is an HF folder sharded by owner: each tensor in an existing file,
     * and zayac reads it given the checkpoint folder */
    char idx[512], *text;
    snprintf(idx, sizeof idx, "%s/z_two/checkpoints/step_000000008/model/", tmp);
    size_t base = strlen(idx);
    snprintf(idx + base, sizeof idx - base, "model.safetensors.index.json");
    assert_int_equal(zy_read_file(idx, &text, NULL), ZY_OK);
    cJSON *index = cJSON_Parse(text);
    free(text);
    cJSON *map = cJSON_GetObjectItem(index, "weight_map"), *e;
    int tensors = 0;
    cJSON_ArrayForEach(e, map) {
        snprintf(idx + base, sizeof idx - base, "%s", e->valuestring);
        if (!zy_path_exists(idx)) fail_msg("%s: %s names a missing file", e->string, idx);
        tensors++;
    }
    cJSON_Delete(index);
    assert_true(tensors > 10);
    char ck[400];
    snprintf(ck, sizeof ck, "%s/z_two/checkpoints/step_000000008", tmp);
    run_result info = spawn_capture(bin, tmp, (const char *const[]){"info", "--model", ck, NULL});
    if (info.code != 0) fail_msg("info on a checkpoint folder: exit %d\n%s", info.code, info.err);
    result_free(&info);
    /* stop 2 ranks at step 4, then go on from that checkpoint on 1 rank and on 4 ranks */
    char out[256];
    path(out, sizeof out, "z_stop");
    run_result r = train(2, out, (const char *const[]){"--stop-after", "4", NULL});
    if (r.code != 3) fail_msg("--stop-after on 2 ranks: exit %d\n%s", r.code, r.err);
    result_free(&r);
    char cmd[1200];
    snprintf(cmd, sizeof cmd,
             "cp -r %s/z_stop %s/z_on1 && cp -r %s/z_stop %s/z_on4 && cp -r %s/z_stop %s/z_chain",
             tmp, tmp, tmp, tmp, tmp, tmp);
    assert_int_equal(system(cmd), 0);
    train_ok(1, "z_on1", (const char *const[]){"--resume", NULL});
    train_ok(4, "z_on4", (const char *const[]){"--resume", NULL});
    path(out, sizeof out, "z_chain"); /* 2 ranks to step 4, 1 rank to 6, 4 ranks to 8 */
    r = train(1, out, (const char *const[]){"--resume", "--stop-after", "2", NULL});
    if (r.code != 3) fail_msg("--stop-after on 1 rank: exit %d\n%s", r.code, r.err);
    result_free(&r);
    train_ok(4, "z_chain", (const char *const[]){"--resume", NULL});
    double straight[8], on1[8], on4[8], chain[8];
    int w;
    assert_int_equal(losses("z_two", straight, 8, &w), 8);
    assert_int_equal(losses("z_on1", on1, 8, &w), 8);
    assert_int_equal(w, 1);
    assert_int_equal(losses("z_on4", on4, 8, &w), 8);
    assert_int_equal(w, 4);
    assert_int_equal(losses("z_chain", chain, 8, &w), 8);
    assert_int_equal(w, 4);
    double worst = worst_relative(on1, straight, 8), w4 = worst_relative(on4, straight, 8);
    const double wc = worst_relative(chain, straight, 8);
    if (w4 > worst) worst = w4;
    print_message("2 -> 1 and 2 -> 4 ranks at step 4: worst relative loss difference %.3g; "
                  "2 -> 1 -> 4: %.3g\n",
                  worst, wc);
    assert_true(worst <= 1e-4);
    assert_true(wc <= 1e-4);
}

/* `RUN` (a copy of FROM when given) resumed on n ranks and saved again without a step
 * (`--resume --stop-after 0`: exit 3). */
static void resave(int n, const char *from, const char *run) {
    char out[256], cmd[700];
    path(out, sizeof out, run);
    if (from) {
        snprintf(cmd, sizeof cmd, "cp -r %s/%s %s", tmp, from, out);
        assert_int_equal(system(cmd), 0);
    }
    run_result r = train(n, out, (const char *const[]){"--resume", "--stop-after", "0", NULL});
    if (r.code != 3 || !strstr(r.out, "stopped on request (--stop-after 0) at step 4"))
        fail_msg("%d ranks re-saving %s: exit %d\n%s\n%s", n, run, r.code, r.out, r.err);
    result_free(&r);
}

/* Differences between run a's and run b's step-4 checkpoints (ckpt_compare.h: the tensors by
 * global name, read from the files, whichever rank's file holds them; config.json, state.json). */
static int step4_differences(const char *a, const char *b, int *tensors) {
    char da[300], db[300], why[2048];
    snprintf(da, sizeof da, "%s/%s/checkpoints/step_000000004", tmp, a);
    snprintf(db, sizeof db, "%s/%s/checkpoints/step_000000004", tmp, b);
    const int d = ckpt_compare(da, db, tensors, why, sizeof why);
    if (d < 0) fail_msg("comparing %s and %s: %s", a, b, why);
    if (d > 0) print_message("%s vs %s: %d differences:\n%s", a, b, d, why);
    return d;
}

/* Reshaping loses nothing: a checkpoint written by 2 ranks in the middle of a run, loaded by 1
 * rank (and by 4) and saved without a step, then loaded by 2 ranks and saved again, holds every
 * tensor of model/ and train/ bit for bit and the same config.json and state.json (step,
 * counters, data position) as the original, in each world size's own layout. The comparison
 * itself is shown to see a one-bit change and an edited counter. */
static void test_reshape_round_trip_is_exact(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    char out[256], p[400], cmd[700];
    path(out, sizeof out, "rs2");
    run_result r = train(2, out, (const char *const[]){"--stop-after", "4", NULL});
    if (r.code != 3) fail_msg("--stop-after on 2 ranks: exit %d\n%s", r.code, r.err);
    result_free(&r);
    resave(1, "rs2", "rs21");
    resave(4, "rs2", "rs24");
    resave(2, "rs21", "rs212");
    resave(2, "rs24", "rs242");
    /* each is laid out by its own ranks: one weights file on 1 rank, four state files on 4 */
    snprintf(p, sizeof p, "%s/rs21/checkpoints/step_000000004/model/model.safetensors", tmp);
    assert_true(zy_path_exists(p));
    snprintf(p, sizeof p, "%s/rs24/checkpoints/step_000000004/train/train_state.rank_3.safetensors",
             tmp);
    assert_true(zy_path_exists(p));
    snprintf(p, sizeof p,
             "%s/rs212/checkpoints/step_000000004/model/model-00002-of-00002.safetensors", tmp);
    assert_true(zy_path_exists(p));
    const char *runs[4] = {"rs21", "rs24", "rs212", "rs242"};
    int tensors = 0;
    for (int i = 0; i < 4; i++) assert_int_equal(step4_differences("rs2", runs[i], &tensors), 0);
    print_message("2 -> 1 -> 2 and 2 -> 4 -> 2 ranks: %d tensors identical bit for bit\n", tensors);
    assert_true(tensors > 40); /* the weights and the moments of every tensor */
    /* the comparison sees one flipped bit in a rank's weights and an edited data position */
    snprintf(cmd, sizeof cmd, "cp -r %s/rs212 %s/rs_bad", tmp, tmp);
    assert_int_equal(system(cmd), 0);
    snprintf(p, sizeof p,
             "%s/rs_bad/checkpoints/step_000000004/model/model-00002-of-00002.safetensors", tmp);
    FILE *f = fopen(p, "r+b");
    assert_non_null(f);
    assert_int_equal(fseek(f, -1, SEEK_END), 0);
    const int c = fgetc(f);
    assert_int_equal(fseek(f, -1, SEEK_END), 0);
    fputc(c ^ 1, f);
    fclose(f);
    snprintf(p, sizeof p, "%s/rs_bad/checkpoints/step_000000004/train/state.json", tmp);
    char *text;
    assert_int_equal(zy_read_file(p, &text, NULL), ZY_OK);
    cJSON *st = cJSON_Parse(text);
    free(text);
    cJSON_ReplaceItemInObject(st, "tokens_seen", cJSON_CreateNumber(1));
    text = cJSON_Print(st);
    cJSON_Delete(st);
    assert_int_equal(zy_write_file_atomic(p, text, strlen(text)), ZY_OK);
    free(text);
    assert_int_equal(step4_differences("rs2", "rs_bad", &tensors), 2);
}

/* A data-parallel run that must succeed, and its console's ZeRO-1 line: the optimizer state of
 * all ranks in MiB, and who it says updates the embedding (`who`). */
static double train_zero1_mib(int n, const char *run, const char *const *extra, const char *who) {
    char out[256], want[64];
    path(out, sizeof out, run);
    run_result r = train(n, out, extra);
    if (r.code != 0) fail_msg("%d ranks: exit %d\n%s\n%s", n, r.code, r.out, r.err);
    const char *line = strstr(r.out, "ZeRO-1 over ");
    double mib = -1;
    snprintf(want, sizeof want, "the embedding updated by %s", who);
    if (!line || !strstr(line, want) ||
        sscanf(strstr(line, "optimizer ") ? strstr(line, "optimizer ") : "",
               "optimizer %lf MiB in all", &mib) != 1)
        fail_msg("%d ranks: no ZeRO-1 line saying \"%s\" in:\n%s", n, want, r.out);
    result_free(&r);
    return mib;
}

/* The embedding updated by every rank in `mode` (dist.embedding_update) against its owner alone
 * (reduced to it, updated, sent), on 2 and 4 ranks: every rank holds its moments (replicated) or
 * its slice's (split: they add up to the owner's; the memory line says who updates it), the losses
 * and gradient norms agree (exactly for replicated; split counts each rank's slice in the norm, so
 * only the grouping of its partial sums differs), and by global name the weights and moments at
 * step 4 are the same bits; saved once (the state files hold the owned run's floats); resumed
 * exactly. */
static void check_embedding_update(const char *mode, const char *who, int exact_norms) {
    char setting[64];
    snprintf(setting, sizeof setting, "dist.embedding_update=%s", mode);
    const char *on[] = {"--set", setting, NULL};
    const char *owner[] = {"--set", "dist.embedding_update=owner", NULL};
    for (int n = 2; n <= 4; n += 2) {
        char on_run[32], off_run[32];
        snprintf(on_run, sizeof on_run, "%s%d", mode, n);
        snprintf(off_run, sizeof off_run, "own_%s%d", mode, n);
        const double on_mib = train_zero1_mib(n, on_run, on, who);
        const double off_mib = train_zero1_mib(n, off_run, owner, "its owner");
        /* replicated: the other n - 1 ranks hold the embedding's two moments too; split: each
         * rank holds its slice's, which add up to the owner's */
        const double moments_mib = 2.0 * 320 * 32 * sizeof(float) / (1024.0 * 1024.0);
        const int copies = strcmp(mode, "split") ? n - 1 : 0;
        print_message("%d ranks: optimizer state %.3f MiB %s, %.3f owned\n", n, on_mib, mode,
                      off_mib);
        assert_true(fabs(on_mib - off_mib - copies * moments_mib) <= 0.002); /* printed %.3f */
        double lon[8], loff[8], gon[8], goff[8];
        int w;
        assert_int_equal(losses(on_run, lon, 8, &w), 8);
        assert_int_equal(losses(off_run, loff, 8, &w), 8);
        assert_int_equal(step_column(on_run, "grad_norm", gon, 8, &w), 8);
        assert_int_equal(step_column(off_run, "grad_norm", goff, 8, &w), 8);
        double worst_loss = 0, worst_norm = 0; /* relative */
        for (int k = 0; k < 8; k++) {
            worst_loss = fmax(worst_loss, fabs(lon[k] - loff[k]) / fabs(loff[k]));
            worst_norm = fmax(worst_norm, fabs(gon[k] - goff[k]) / fabs(goff[k]));
        }
        print_message("%d ranks: the embedding %s or owned: losses %.2e, norms %.2e apart\n", n,
                      mode, worst_loss, worst_norm);
        assert_true(worst_loss <= (exact_norms ? 0 : 1e-12));
        assert_true(worst_norm <= (exact_norms ? 0 : 1e-12));
        int tensors = 0;
        assert_int_equal(step4_differences(on_run, off_run, &tensors), 0);
        assert_true(tensors > 40);
    }
    /* saved once: the two state files hold what the owned run's do */
    char p[512], on2[32], off2[32];
    snprintf(on2, sizeof on2, "%s2", mode);
    snprintf(off2, sizeof off2, "own_%s2", mode);
    size_t floats[2] = {0, 0};
    for (int k = 0; k < 4; k++) {
        snprintf(p, sizeof p,
                 "%s/%s/checkpoints/step_000000008/train/train_state.rank_%d.safetensors", tmp,
                 k < 2 ? on2 : off2, k % 2);
        floats[k / 2] += state_floats(p);
    }
    assert_int_equal(floats[0], floats[1]);
    /* and resumed: every rank reads the embedding's moments from its owner's file */
    char out[256], stop[40];
    snprintf(stop, sizeof stop, "%s2_stop", mode);
    path(out, sizeof out, stop);
    run_result r =
        train(2, out, (const char *const[]){"--set", setting, "--stop-after", "4", NULL});
    if (r.code != 3) fail_msg("--stop-after on 2 ranks: exit %d\n%s", r.code, r.err);
    result_free(&r);
    train_ok(2, stop, (const char *const[]){"--set", setting, "--resume", NULL});
    double straight[8], resumed[8];
    int w;
    assert_int_equal(losses(on2, straight, 8, &w), 8);
    assert_int_equal(losses(stop, resumed, 8, &w), 8);
    assert_memory_equal(straight, resumed, sizeof straight);
}

/* Every rank updating the whole embedding (its gradient all-reduced, nothing sent after the
 * update) changes no bit against its owner alone. */
static void test_replicated_embedding_changes_no_bit(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    check_embedding_update("replicated", "every rank", 1);
}

/* Every rank updating a slice (the default: its gradient reduce-scattered, the slices
 * all-gathered after the update) against its owner alone. */
static void test_split_embedding_matches_its_owner(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    check_embedding_update("split", "every rank, a slice each", 0);
}

/* A global batch of 4 sequences cannot be split over 3 ranks: bad input, exit 2, naming the fix. */
static void test_batch_must_divide(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    char out[256];
    path(out, sizeof out, "three");
    run_result r = train(3, out, NULL);
    if (r.code != 2 || !strstr(r.err, "multiple of 3"))
        fail_msg("3 ranks, batch 4: exit %d\n%s", r.code, r.err);
    result_free(&r);
}

/* Background saves on 2 ranks: rank 1 failing to write its shard (as on a full disk) fails that
 * checkpoint on every rank (reported, named), the run goes on, and the next checkpoints land with
 * both shards; no staging folder is left. */
static void test_rank_failing_its_shard(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    char out[256], p[400];
    path(out, sizeof out, "shardfail");
    setenv("ZAYAC_FAULT", "enospc:step=4:rank=1", 1);
    run_result r = train(2, out, (const char *const[]){"--set", "checkpoint_interval=2", NULL});
    unsetenv("ZAYAC_FAULT");
    if (r.code != 0 || !strstr(r.err, "rank 1 could not write its shard"))
        fail_msg("exit %d:\n%s\n%s", r.code, r.out, r.err);
    result_free(&r);
    snprintf(p, sizeof p, "%s/checkpoints/step_000000004", out);
    assert_false(zy_path_exists(p));
    snprintf(p, sizeof p, "%s/checkpoints/step_000000006/train/train_state.rank_1.safetensors",
             out);
    assert_true(zy_path_exists(p));
    snprintf(p, sizeof p, "%s/checkpoints/.shards_step_000000004", out);
    assert_false(zy_path_exists(p));
}

/* The replica check: one weight every rank keeps, moved on rank 1 alone at step 2 (ZAYAC_FAULT=
 * diverge), stays moved where every rank updates the embedding itself (replicated), and the step-4
 * checkpoint refuses to save it: exit 1 naming the step, nothing committed. Split (the default)
 * makes it whole again at the next all-gather (that element is rank 0's), and the checkpoint
 * lands. */
static void test_replica_divergence_is_refused(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    char out[256], p[400];
    setenv("ZAYAC_FAULT", "diverge:step=2:rank=1", 1);
    path(out, sizeof out, "diverged");
    run_result r =
        train(2, out, (const char *const[]){"--set", "dist.embedding_update=replicated", NULL});
    if (r.code != 1 || !strstr(r.err, "step 4: the ranks' weights differ"))
        fail_msg("replicated: exit %d:\n%s\n%s", r.code, r.out, r.err);
    result_free(&r);
    snprintf(p, sizeof p, "%s/checkpoints/step_000000004", out);
    assert_false(zy_path_exists(p));
    path(out, sizeof out, "diverged_split");
    r = train(2, out, NULL);
    unsetenv("ZAYAC_FAULT");
    if (r.code != 0 || !strstr(r.out, "weights identical on all 2 ranks"))
        fail_msg("split: exit %d:\n%s\n%s", r.code, r.out, r.err);
    result_free(&r);
    snprintf(p, sizeof p, "%s/checkpoints/step_000000004", out);
    assert_true(zy_path_exists(p));
}

/* A fresh 2-rank run into a folder that holds a run: every rank refuses (exit 2), rank 0 saying
 * why, before any rank writes there. */
static void test_ranks_refuse_a_used_out_dir(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    char out[256];
    path(out, sizeof out, "used");
    run_result r = train(2, out, (const char *const[]){"--stop-after", "1", NULL});
    if (r.code != 3) fail_msg("first run: exit %d\n%s", r.code, r.err);
    result_free(&r);
    r = train(2, out, (const char *const[]){"--stop-after", "1", NULL});
    if (r.code != 2 || !strstr(r.err, "holds a run") || !strstr(r.err, "rank 0 refused"))
        fail_msg("second fresh run: exit %d\n%s", r.code, r.err);
    result_free(&r);
}

/* Preemption under the launcher: SIGTERM to `zayac launch --cpu -n 2` reaches both ranks, which
 * finish their step, save together and exit 3 (so does the launcher); --resume on 2 ranks then
 * continues bit for bit: every loss equals the uninterrupted run's. */
static void test_launcher_sigterm_saves_and_resumes_exactly(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    enum { STEPS = 40 };
    char cfg[300], out[256];
    path(cfg, sizeof cfg, "train.json");
    const char *common[] = {"--set", "schedule.kind=constant", "--set", "eval_interval=0",
                            "--set", "checkpoint_interval=0",  NULL};
    const char *args[40];
    int k = 0;
    args[k++] = "--steps", args[k++] = "40";
    for (const char **c = common; *c; c++) args[k++] = *c;
    args[k] = NULL;
    path(out, sizeof out, "pre_straight");
    run_result r = train(2, out, args);
    if (r.code != 0) fail_msg("uninterrupted run: exit %d\n%s", r.code, r.err);
    result_free(&r);
    path(out, sizeof out, "pre_stop");
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY);
        dup2(fd, 1);
        execl(bin, bin, "launch", "--cpu", "-n", "2", "--", bin, "train", "--config", cfg, "--out",
              out, "--steps", "100000", "--set", "schedule.kind=constant", "--set",
              "eval_interval=0", "--set", "checkpoint_interval=0", (char *)NULL);
        _exit(127);
    }
    /* SIGTERM as soon as the first step is written (polled every 10 ms): the run keeps
     * stepping until the signal lands, so a late signal under load must still leave steps
     * before STEPS to resume */
    for (int i = 0; i < 6000 && rows_written("pre_stop") < 1; i++) usleep(10000);
    assert_true(rows_written("pre_stop") >= 1);
    kill(pid, SIGTERM);
    int status;
    double t0 = zy_now();
    pid_t done = 0;
    while ((done = waitpid(pid, &status, WNOHANG)) == 0 && zy_now() - t0 < 60) usleep(100000);
    if (done == 0) {
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        fail_msg("the launcher still ran 60 s after SIGTERM");
    }
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 3);
    const int stopped_at = rows_written("pre_stop");
    assert_true(stopped_at < STEPS);
    k = 0;
    args[k++] = "--steps", args[k++] = "40", args[k++] = "--resume";
    for (const char **c = common; *c; c++) args[k++] = *c;
    args[k] = NULL;
    r = train(2, out, args);
    if (r.code != 0) fail_msg("resume after the launcher's SIGTERM: exit %d\n%s", r.code, r.err);
    result_free(&r);
    double straight[STEPS], resumed[STEPS];
    int w;
    assert_int_equal(losses("pre_straight", straight, STEPS, &w), STEPS);
    assert_int_equal(losses("pre_stop", resumed, STEPS, &w), STEPS);
    print_message("SIGTERM to the launcher: stopped after step %d, exit 3; resumed to %d\n",
                  stopped_at, STEPS);
    for (int i = 0; i < STEPS; i++)
        if (straight[i] != resumed[i])
            fail_msg("step %d: %.17g resumed, %.17g uninterrupted", i + 1, resumed[i], straight[i]);
}

/* A long 2-rank job in the background (stdout dropped, stderr to err): waits until it trains,
 * then sends `sig` to one rank (not mpirun: the newest zayac process whose arguments name this
 * run) and waits at most 60 s for the job to end. Returns the job's status; *took the seconds. */
static int disturb_job(const char *run, const char *timeout, const char *sig, const char *err,
                       double *took) {
    char out[256], cfg[300], set_timeout[64];
    path(out, sizeof out, run);
    path(cfg, sizeof cfg, "train.json");
    snprintf(set_timeout, sizeof set_timeout, "dist.timeout_s=%s", timeout);
    pid_t pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        int fd = open("/dev/null", O_WRONLY), fe = open(err, O_WRONLY | O_CREAT | O_TRUNC, 0644);
        dup2(fd, 1);
        dup2(fe, 2);
        execl(mpirun, mpirun, "--oversubscribe", "-n", "2", bin, "train", "--config", cfg, "--out",
              out, "--steps", "100000", "--set", "eval_interval=0", "--set",
              "checkpoint_interval=0", "--set", set_timeout, (char *)NULL);
        _exit(127);
    }
    /* disturb the training loop, not the start-up: wait for two finished steps */
    for (int i = 0; i < 600 && rows_written(run) < 2; i++) usleep(100000);
    assert_true(rows_written(run) >= 2);
    char cmd[800];
    snprintf(cmd, sizeof cmd, "pkill -%s -n -f '^%s train .*%s'", sig, bin, out);
    assert_int_equal(system(cmd), 0);
    double t0 = zy_now();
    int status;
    pid_t done = 0;
    while ((done = waitpid(pid, &status, WNOHANG)) == 0 && zy_now() - t0 < 60) usleep(100000);
    if (done == 0) {
        snprintf(cmd, sizeof cmd, "pkill -9 -f '%s'", out);
        assert_true(system(cmd) >= 0);
        kill(pid, SIGKILL);
        waitpid(pid, &status, 0);
        fail_msg("the job still ran 60 s after a rank got SIG%s", sig);
    }
    *took = zy_now() - t0;
    return status;
}

/* A rank killed in the middle of training ends the whole job (no rank waits forever). */
static void test_dead_rank_ends_the_job(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    char err[300];
    path(err, sizeof err, "dead_stderr.txt");
    double took;
    int status = disturb_job("dead", "300", "KILL", err, &took);
    print_message("job ended %.1f s after a rank was killed, status 0x%x\n", took, status);
    assert_true(!WIFEXITED(status) || WEXITSTATUS(status) != 0);
}

/* A rank that stops answering (SIGSTOP: alive but stuck) makes the other fail once
 * dist.timeout_s passes, with a message naming the silent rank and the step, whichever
 * collective it was waiting in; the job ends. */
static void test_stuck_rank_times_out(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    char err[300], *text;
    path(err, sizeof err, "stuck_stderr.txt");
    double took;
    int status = disturb_job("stuck", "5", "STOP", err, &took);
    print_message("job ended %.1f s after a rank stopped; status 0x%x\n", took, status);
    assert_int_equal(zy_read_file(err, &text, NULL), ZY_OK);
    /* the stopped rank is whichever started last (0 or 1): the other names it */
    const int named =
        (strstr(text, "from rank 1") || strstr(text, "from rank 0")) && strstr(text, "step ");
    if (!named) print_message("no message naming the stuck rank and the step:\n%s", text);
    free(text);
    assert_true(named);
    assert_true(!WIFEXITED(status) || WEXITSTATUS(status) != 0);
}

/* A number from a bench train JSON file: top-level key, or "memory.key". */
static double json_number(const char *file, const char *key) {
    char *text;
    if (zy_read_file(file, &text, NULL) != ZY_OK) fail_msg("%s", zy_errmsg());
    cJSON *j = cJSON_Parse(text);
    free(text);
    assert_non_null(j);
    const char *dot = strchr(key, '.');
    char group[64] = "";
    if (dot) snprintf(group, sizeof group, "%.*s", (int)(dot - key), key);
    cJSON *o = dot ? cJSON_GetObjectItem(j, group) : j;
    cJSON *v = o ? cJSON_GetObjectItem(o, dot ? dot + 1 : key) : NULL;
    if (!cJSON_IsNumber(v)) fail_msg("%s: no number %s", file, key);
    double x = v->valuedouble;
    cJSON_Delete(j);
    return x;
}

/* `zayac bench train -n 2` runs itself as two ranks (here CPU ranks over MPI): one report, the
 * tokens of both ranks, and ZeRO-1's optimizer state split between them (AdamW: the two shares
 * add up to the one-rank state exactly; the larger is well under the whole); with the embedding
 * replicated or split (--embedding-update replicated, split: the default) both ranks hold its
 * moments: the shares add up to the one-rank state plus one more copy of them. */
static void test_bench_train_ranks(void **state) {
    (void)state;
    if (!have_mpi()) skip();
    char one[256], two[256], rep[256], spl[256], muon[256];
    path(one, sizeof one, "bench1.json");
    path(two, sizeof two, "bench2.json");
    path(rep, sizeof rep, "bench2rep.json");
    path(spl, sizeof spl, "bench2split.json");
    path(muon, sizeof muon, "bench2muon.json");
    const char *common[] = {"--preset", "tiny",    "--device", "cpu",      "--batch", "2", "--seq",
                            "32",       "--steps", "2",        "--warmup", "1",       NULL};
    const char *args[40];
    /* 1 rank; 2 ranks, the embedding owned; replicated; split (the default: no option); Muon */
    const char *modes[] = {NULL, "owner", "replicated", NULL, NULL};
    const char *jsons[] = {one, two, rep, spl, muon};
    for (int n = 0; n < 5; n++) {
        int k = 0;
        args[k++] = "bench", args[k++] = "train";
        if (n > 0) args[k++] = "-n", args[k++] = "2";
        if (modes[n]) args[k++] = "--embedding-update", args[k++] = modes[n];
        for (const char **c = common; *c; c++) args[k++] = *c;
        args[k++] = "--optim", args[k++] = n == 4 ? "muon" : "adamw";
        args[k++] = "--json", args[k++] = jsons[n], args[k] = NULL;
        run_result r = spawn_capture(bin, tmp, args);
        if (r.code != 0) fail_msg("bench train case %d: exit %d\n%s\n%s", n, r.code, r.out, r.err);
        int reports = 0;
        for (const char *p = r.out; (p = strstr(p, "# zayac bench train")); p++) reports++;
        assert_int_equal(reports, 1); /* rank 0 alone reports */
        result_free(&r);
    }
    assert_true(json_number(two, "world_size") == 2);
    assert_true(json_number(two, "tokens_per_step") == 2 * json_number(one, "tokens_per_step"));
    const double whole = json_number(one, "memory.optimizer_bytes");
    const double all = json_number(two, "memory.optimizer_bytes_all_ranks");
    const double largest = json_number(two, "memory.optimizer_bytes");
    print_message("AdamW state: 1 rank %.0f bytes; 2 ranks %.0f in all, the larger share %.0f\n",
                  whole, all, largest);
    assert_true(all == whole);
    assert_true(largest < 0.75 * whole);
    /* the tiny preset's embedding: two AdamW moments of vocab x hidden floats */
    zy_config tiny;
    assert_int_equal(config_preset_builtin(&tiny, "tiny"), ZY_OK);
    const double moments = 2.0 * tiny.vocab_size * tiny.hidden_size * sizeof(float);
    const double all_rep = json_number(rep, "memory.optimizer_bytes_all_ranks");
    const double all_split = json_number(spl, "memory.optimizer_bytes_all_ranks");
    print_message("replicated: %.0f in all, split %.0f (the embedding's moments: %.0f bytes)\n",
                  all_rep, all_split, moments);
    assert_true(all_rep == whole + moments);
    assert_true(all_split == whole); /* the slices' moments add up to the whole */
    /* and each rank holds half the embedding's moments instead of all of them (the same owners
     * otherwise; up to 16 floats of each moment's slice for alignment) */
    const double big_rep = json_number(rep, "memory.optimizer_bytes");
    const double big_split = json_number(spl, "memory.optimizer_bytes");
    print_message("the larger rank: replicated %.0f bytes, split %.0f\n", big_rep, big_split);
    assert_true(big_split <= big_rep - moments / 2 + 2 * 16 * sizeof(float));
    /* distributed Muon against all-gathering the gradients it needs: the bench reports what
     * the gather would hold (every Muon matrix's fp32 gradient), nothing under AdamW */
    zy_param_table t;
    model_build_table(&t, &tiny);
    double matrices = 0;
    for (int i = 0; i < t.count; i++)
        if (t.items[i].kind == ZY_PARAM_MATRIX)
            matrices += (double)t.items[i].numel * sizeof(float);
    params_free(&t);
    const double gather = json_number(muon, "memory.muon_gradient_gather_bytes");
    print_message("Muon on 2 ranks: optimizer %.0f bytes on the larger rank; gathering the "
                  "gradients would hold %.0f more\n",
                  json_number(muon, "memory.optimizer_bytes"), gather);
    assert_true(matrices > 0 && gather == matrices);
    assert_true(json_number(two, "memory.muon_gradient_gather_bytes") == 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ranks_match_one),
        cmocka_unit_test(test_two_ranks_repeat_and_resume_exactly),
        cmocka_unit_test(test_zero1_shards_and_reshapes),
        cmocka_unit_test(test_reshape_round_trip_is_exact),
        cmocka_unit_test(test_replicated_embedding_changes_no_bit),
        cmocka_unit_test(test_split_embedding_matches_its_owner),
        cmocka_unit_test(test_batch_must_divide),
        cmocka_unit_test(test_ranks_refuse_a_used_out_dir),
        cmocka_unit_test(test_rank_failing_its_shard),
        cmocka_unit_test(test_replica_divergence_is_refused),
        cmocka_unit_test(test_launcher_sigterm_saves_and_resumes_exactly),
        cmocka_unit_test(test_bench_train_ranks),
        cmocka_unit_test(test_dead_rank_ends_the_job),
        cmocka_unit_test(test_stuck_rank_times_out),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
