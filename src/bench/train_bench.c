/* The whole-training-step benchmark (see train_bench.h). The step is the training step itself
 * (train/step.h, one micro-batch), so what is timed here is what a training run pays per step; the
 * profiled step times its phases through the step's phase hook. The data are synthetic: uniform
 * random token ids from the counter-based RNG, targets the ids shifted by one, drawn outside the
 * timed region. */
#include "bench/train_bench.h"
#include "base/err.h"
#include "base/fileio.h"
#include "base/rng.h"
#include "base/timer.h"
#include "bench/gemm.h"
#include "train/memory.h"
#include "train/ranks.h"
#include "train/step.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <omp.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#define GIB               (1024.0 * 1024.0 * 1024.0)
#define BT_GRAD_CLIP      1.0f /* train_config's default */
#define BT_MAX_TOKENS     (1 << 24)
#define BT_PROF_MAX       128
#define BT_DIST_TIMEOUT_S 300.0 /* train's dist.timeout_s default */

void bench_train_opts_default(bench_train_opts *o) {
    memset(o, 0, sizeof *o);
    o->device = ZY_DEV_CPU;
    o->cuda = ops_cuda_opts_default();
    o->batch = 8;
    o->seq = 2048;
    o->steps = 20;
    o->warmup = 3;
    o->lr = 3e-4f;
    zy_optim_config oc;
    optim_config_default(&oc);
    o->ns_steps = oc.muon_ns_steps;
    o->ns_coefs = oc.muon_ns_coefs;
    o->ns_precond = oc.muon_ns_precond;
    o->adam_moments = oc.adam_moments;
    o->muon_momentum_dtype = oc.muon_momentum_dtype;
    o->seed = 1;
    o->embedding_update = ZY_EMB_SPLIT;
}

int bench_train_check(const bench_train_opts *o) {
    ZY_TRY(config_validate(&o->model, o->model_name[0] ? o->model_name : "model"));
    if (o->batch < 1 || o->batch > 65536)
        return zy_fail("--batch must be 1..65536, got %d", o->batch);
    if (o->seq < 1) return zy_fail("--seq must be at least 1, got %d", o->seq);
    if (o->seq > o->model.max_position_embeddings)
        return zy_fail("--seq %d exceeds the model's max_position_embeddings %d (%s)", o->seq,
                       o->model.max_position_embeddings, o->model_name);
    if ((int64_t)o->batch * o->seq > BT_MAX_TOKENS)
        return zy_fail("--batch %d x --seq %d = %lld tokens per step; at most %d", o->batch, o->seq,
                       (long long)o->batch * o->seq, BT_MAX_TOKENS);
    if (o->steps < 1 || o->steps > 1000000)
        return zy_fail("--steps must be 1..1000000, got %d", o->steps);
    if (o->warmup < 0 || o->warmup > 1000000)
        return zy_fail("--warmup must be 0..1000000, got %d", o->warmup);
    if (!(o->lr > 0) || !(o->lr <= 10)) return zy_fail("--lr must be in (0, 10], got %g", o->lr);
    if (o->ns_steps < 1 || o->ns_steps > 100)
        return zy_fail("--ns-steps must be 1..100, got %d", o->ns_steps);
    if (!(o->peak_tflops >= 0) || !isfinite(o->peak_tflops))
        return zy_fail("--peak-tflops must be a positive number, got %g", o->peak_tflops);
    if (o->threads < 0 || o->threads > 4096)
        return zy_fail("--threads must be 0..4096, got %d", o->threads);
    if (o->device == ZY_DEV_CUDA && o->gpu < 0)
        return zy_fail("--device cuda:%d: not a device index", o->gpu);
#ifndef ZY_HAVE_CUDA
    if (o->device == ZY_DEV_CUDA)
        return zy_fail("--device cuda: this zayac was built without CUDA (rebuild with nvcc on "
                       "PATH)");
#endif
    return ZY_OK;
}

/* ------------------------------------------------------------------ the training state */

typedef struct {
    const bench_train_opts *o;
    zy_ctx ctx;
    zy_step st;     /* the training step's state: model, activations, optimizer, balancing */
    zy_ranks ranks; /* the data-parallel ranks (world 1 without a launcher) */
    int have_ctx;
} bt_state;

/* Synthetic batch number `step` of this rank into the step's buffers: x[b] = T+1 random ids,
 * ids[b] = x[b][:T], targets = x[b][1:]. Its own seed, so it never replays the weights' streams
 * (seed, tensor index); each rank its own stream. */
static void bt_batch(bt_state *s, int64_t step) {
    const int B = s->o->batch, T = s->o->seq, V = s->o->model.vocab_size;
    const zy_comm *c = &s->ranks.comm;
    zy_rng r =
        zy_rng_init(s->o->seed ^ 0xda7a5eedda7a5eedull, (uint64_t)(step * c->world + c->rank));
    for (int b = 0; b < B; b++) {
        int32_t prev = (int32_t)zy_rng_below(&r, (uint64_t)V);
        for (int t = 0; t < T; t++) {
            int32_t next = (int32_t)zy_rng_below(&r, (uint64_t)V);
            s->st.ids[(size_t)b * T + t] = prev;
            s->st.targets[(size_t)b * T + t] = next;
            prev = next;
        }
    }
}

/* Waits for the device and reads the clock (seconds). */
static double bt_clock(bt_state *s) {
    ops_sync(&s->ctx);
    return zy_now();
}

/* The phase hook of the profiled step: each phase's wall time, the device synchronised. */
typedef struct {
    bt_state *s;
    double t;         /* end of the previous phase */
    double *phase_ms; /* [ZY_STEP_NPHASES] accumulated */
} bt_phase_timer;

static void bt_phase_end(void *user, zy_step_phase p) {
    bt_phase_timer *pt = user;
    double t1 = bt_clock(pt->s);
    pt->phase_ms[p] += (t1 - pt->t) * 1e3;
    pt->t = t1;
}

/* One training step on the batch already in the buffers; phase_ms (when not NULL) accumulates
 * each phase's wall time. A non-finite loss or norm does not stop it (the caller counts them), so
 * every step costs the same; only a collective can fail (a rank died). */
static int bt_step(bt_state *s, double *loss, double *gnorm, double *phase_ms) {
    bt_phase_timer pt = {s, phase_ms ? bt_clock(s) : 0.0, phase_ms};
    zy_step_hooks hooks = {.phase_end = phase_ms ? bt_phase_end : NULL, .user = &pt};
    return step_run(&s->st, &hooks, s->o->lr, loss, gnorm);
}

/* Device bytes in use (total - free) on CUDA; 0 on the CPU. */
static int bt_used(const bt_state *s, double *used, double *total) {
    *used = 0;
    if (total) *total = 0;
    if (s->o->device != ZY_DEV_CUDA) return ZY_OK;
    size_t fr, tot;
    ZY_TRY(bench_train_gpu_mem(s->o->gpu, &fr, &tot));
    *used = (double)(tot - fr);
    if (total) *total = (double)tot;
    return ZY_OK;
}

static int bt_init(bt_state *s, const bench_train_opts *o, const dist_env *e,
                   bench_train_result *r) {
    memset(s, 0, sizeof *s);
    s->o = o;
    if (o->device == ZY_DEV_CUDA) {
        zy_cuda_opts co = o->cuda;
        co.overlap_optimizer = step_overlaps(co.overlap_optimizer, e->world);
        ZY_TRY(ops_ctx_init_cuda_opts(&s->ctx, o->gpu, &co));
    } else {
        if (o->threads > 0) omp_set_num_threads(o->threads);
        ops_ctx_init_cpu(&s->ctx, o->threads);
    }
    s->have_ctx = 1;
    ZY_TRY(ranks_connect(&s->ranks, e, &s->ctx, BT_DIST_TIMEOUT_S));
    double u0, u1;
    zy_optim_config oc;
    optim_config_default(&oc);
    oc.use_muon = o->use_muon;
    oc.muon_ns_steps = o->ns_steps;
    oc.muon_ns_coefs = o->ns_coefs;
    oc.muon_ns_precond = o->ns_precond;
    oc.adam_moments = o->adam_moments;
    oc.muon_momentum_dtype = o->muon_momentum_dtype;
    oc.lr = o->lr;
    oc.embedding_update = o->embedding_update;
    char what[128];
    snprintf(what, sizeof what, "bench train with batch %d x %d", o->batch, o->seq);
    zy_mem_need need;
    ZY_TRY(mem_check(&s->ctx, &o->model, o->batch, o->seq, o->recompute, &oc, e->world,
                     e->local_world > 0 ? e->local_world : e->world, what, &need));
    mem_grow_workspace(&s->ctx, &need, mem_workspace_wanted(&s->ctx, &o->model, o->batch, o->seq));
    r->acts_estimate = need.acts;
    r->workspace_estimate = need.workspace;
    ZY_TRY(step_init_model(&s->st, &s->ctx, &o->model, o->batch, o->seq, 1));
    step_set_comm(&s->st, &s->ranks.comm);
    model_init_weights(&s->st.model, o->seed);
    ZY_TRY(bt_used(s, &u0, NULL));
    ZY_TRY(step_init_acts(&s->st, o->recompute));
    ZY_TRY(bt_used(s, &u1, NULL));
    r->acts_bytes = o->device == ZY_DEV_CUDA ? u1 - u0 : NAN;
    zy_balance_config bc;
    balance_config_default(&bc);
    zy_step_config sc = {.grad_accum = 1,
                         .grad_clip = BT_GRAD_CLIP,
                         .balance = 1,
                         .overlap_optimizer = o->cuda.overlap_optimizer};
    ZY_TRY(step_init_training(&s->st, &sc, &oc, &bc));
    r->grads_bytes = (double)s->st.model.table.total * sizeof(float);
    /* this rank's fp32 masters (ZeRO-1 on GPUs gave the other ranks' matrices back) */
    r->params_bytes = (double)s->st.model.params_resident;
    /* this rank's optimizer: the moments of the tensors it owns and its Newton-Schulz workspace */
    double ob[3];
    ob[0] = ob[2] = optim_bytes(&s->st.opt);
    ob[1] = -ob[0];
    zy_comm *c = &s->ranks.comm;
    ZY_TRY(comm_all_reduce(c, ob, 2, ZY_COMM_F64, ZY_COMM_MAX));
    ZY_TRY(comm_all_reduce(c, ob + 2, 1, ZY_COMM_F64, ZY_COMM_SUM));
    ZY_TRY(comm_all_reduce(c, &r->params_bytes, 1, ZY_COMM_F64, ZY_COMM_MAX));
    r->optim_bytes = ob[0];
    r->optim_bytes_min = -ob[1];
    r->optim_bytes_all = ob[2];
    r->muon_gather_bytes = 0;
    const zy_param_table *t = &s->st.model.table;
    for (int i = 0; oc.use_muon && c->world > 1 && i < t->count; i++)
        if (t->items[i].kind == ZY_PARAM_MATRIX)
            r->muon_gather_bytes += (double)t->items[i].numel * sizeof(float);
    return ZY_OK;
}

static void bt_free(bt_state *s) {
    step_free(&s->st);
    ranks_free(&s->ranks);
    if (s->have_ctx) ops_ctx_free(&s->ctx);
    memset(s, 0, sizeof *s);
}

/* ------------------------------------------------------------------ measuring */

/* The bf16 matmul peak of device dev: the best of cuBLASLt's first 4 candidates on one 8192^3
 * GEMM (Y = X W^T) under sustained load, with the GEMM benchmark's code. */
static int bt_measure_peak(int dev, double *tflops) {
    bench_gemm_opts g;
    bench_gemm_opts_default(&g);
    g.dtypes[0] = BENCH_BF16;
    g.ndtypes = 1;
    g.algos = 4;
    g.check = 0;
    g.warmup_ms = 200;
    g.target_ms = 200;
    bench_gemm_shape sq;
    memset(&sq, 0, sizeof sq);
    sq.m = sq.n = sq.k = 8192;
    sq.layout = GEMM_XWT;
    snprintf(sq.group, sizeof sq.group, "square");
    snprintf(sq.label, sizeof sq.label, "peak 8192^3");
    g.shapes = &sq;
    g.nshapes = 1;
    bench_gemm_result res;
    int rc = bench_gemm_run(&g, dev, &res, NULL);
    if (rc == ZY_OK && (res.nrows < 1 || !(res.rows[0].tflops > 0)))
        rc = zy_fail("measuring the bf16 matmul peak: no result");
    if (rc == ZY_OK) *tflops = res.rows[0].tflops;
    bench_gemm_result_free(&res);
    return rc == ZY_OK ? ZY_OK
                       : zy_fail_ctx("measuring the bf16 matmul peak (--peak-tflops N "
                                     "skips it)");
}

static void bt_progress(const bench_train_opts *o, const char *what, int i, int n, double ms,
                        double loss) {
    if (!o->progress) return;
    fprintf(o->progress, "%s %d/%d: %.2f ms, loss %.4f\n", what, i, n, ms, loss);
    fflush(o->progress);
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* Folds the step's routed counts into r's expert-load ratios (timed step index i). */
static void bt_load(const bt_state *s, bench_train_result *r, int i) {
    const int L = s->o->model.num_hidden_layers, E = s->o->model.num_experts;
    if (i == 0) r->load_ratio_mean = 0, r->load_ratio_max = 0;
    double worst;
    const double mean = balance_load_ratio(s->st.step_counts, L, E, &worst);
    if (worst > r->load_ratio_max) r->load_ratio_max = worst;
    /* running mean over the timed steps */
    r->load_ratio_mean += (mean - r->load_ratio_mean) / (i + 1);
}

/* Warm-up and timed steps, then the memory readings. */
static int bt_timed(bt_state *s, bench_train_result *r, double used0) {
    const bench_train_opts *o = s->o;
    const int total = o->warmup + o->steps;
    r->step_ms = zy_calloc((size_t)o->steps, sizeof *r->step_ms);
    r->nsteps = o->steps;
    double loop0 = 0;
    for (int i = 0; i < total; i++) {
        double loss, gnorm;
        bt_batch(s, i);
        if (i == o->warmup) { /* no warm-up step's update still running beside the next */
            ZY_TRY(step_weights_ready(&s->st));
            loop0 = bt_clock(s);
        }
        double t0 = bt_clock(s);
        ZY_TRY(bt_step(s, &loss, &gnorm, NULL));
        double ms = (bt_clock(s) - t0) * 1e3;
        if (i == 0) r->loss_first = loss;
        r->loss_last = loss;
        if (!isfinite(loss) || !isfinite(gnorm)) {
            if (!r->nonfinite_steps && o->progress)
                fprintf(o->progress,
                        "# warning: step %d: loss %g, gradient norm %g (not finite; "
                        "the benchmark goes on)\n",
                        i + 1, loss, gnorm);
            r->nonfinite_steps++;
        }
        if (i < o->warmup) {
            bt_progress(o, "warmup", i + 1, o->warmup, ms, loss);
        } else {
            bt_load(s, r, i - o->warmup);
            r->step_ms[i - o->warmup] = ms;
            bt_progress(o, "step", i - o->warmup + 1, o->steps, ms, loss);
        }
    }
    /* The mean is the whole timed loop's: each step's update runs beside the next one's forward
     * (cuda.overlap_optimizer), so it goes on past the step's window, while the next batch is
     * drawn, and the last one after the loop; the windows alone would miss that time. */
    ZY_TRY(step_weights_ready(&s->st));
    double loop_ms = (bt_clock(s) - loop0) * 1e3;
    /* a step lasts as long as its slowest rank */
    ZY_TRY(comm_all_reduce(&s->ranks.comm, r->step_ms, (size_t)o->steps, ZY_COMM_F64, ZY_COMM_MAX));
    ZY_TRY(comm_all_reduce(&s->ranks.comm, &loop_ms, 1, ZY_COMM_F64, ZY_COMM_MAX));
    r->step_ms_min = INFINITY;
    r->step_ms_max = 0;
    for (int i = 0; i < o->steps; i++) {
        if (r->step_ms[i] < r->step_ms_min) r->step_ms_min = r->step_ms[i];
        if (r->step_ms[i] > r->step_ms_max) r->step_ms_max = r->step_ms[i];
    }
    r->step_ms_mean = loop_ms / o->steps;
    r->tokens_per_s = (double)r->tokens_per_step / (r->step_ms_mean * 1e-3);
    r->model_tflops = r->flops_per_token * r->tokens_per_s / 1e12;
    r->mfu = r->peak_tflops > 0 ? r->model_tflops / (r->peak_tflops * r->world) : NAN;
    if (o->device == ZY_DEV_CUDA) {
        /* zayac allocates everything up front, so after the warm-up this is the peak */
        double used;
        ZY_TRY(bt_used(s, &used, NULL));
        r->mem_gib = (used - used0) / GIB;
        r->device_used_gib = used / GIB;
    } else {
        struct rusage ru;
        getrusage(RUSAGE_SELF, &ru);
        r->mem_gib = (double)ru.ru_maxrss * 1024.0 / GIB; /* Linux: kilobytes */
    }
    return comm_all_reduce(&s->ranks.comm, &r->mem_gib, 1, ZY_COMM_F64, ZY_COMM_MAX);
}

static int by_ms_desc(const void *a, const void *b) {
    const double x = ((const zy_op_time *)a)->ms, y = ((const zy_op_time *)b)->ms;
    return (x < y) - (x > y);
}

/* t[0, n) and the m entries after them as one list, each op once (times and calls summed), most
 * time first; returns its length. */
static int merge_times(zy_op_time *t, int n, int m) {
    int k = n;
    for (int j = n; j < n + m; j++) {
        int i = 0;
        while (i < k && strcmp(t[i].name, t[j].name) != 0) i++;
        if (i < k) {
            t[i].ms += t[j].ms;
            t[i].calls += t[j].calls;
        } else {
            t[k++] = t[j];
        }
    }
    qsort(t, (size_t)k, sizeof *t, by_ms_desc);
    return k;
}

/* One extra step with the op profiler on: the per-op breakdown and the phases (this rank's), and
 * every rank's optimizer phase. */
static int bt_profiled(bt_state *s, bench_train_result *r) {
    const bench_train_opts *o = s->o;
    double loss, gnorm;
    bt_batch(s, (int64_t)o->warmup + o->steps);
    zy_ctx *uc = step_update_ctx(&s->st); /* the update's context (its own with the overlap) */
    ops_sync(uc);
    ops_sync(&s->ctx);
    ops_prof_reset(&s->ctx);
    if (uc != &s->ctx) ops_prof_reset(uc);
    s->ctx.prof = uc->prof = 1;
    double t0 = bt_clock(s);
    ZY_TRY(bt_step(s, &loss, &gnorm, r->phase_ms));
    r->prof_step_ms = (bt_clock(s) - t0) * 1e3;
    r->optim_ms_rank = zy_calloc((size_t)r->world, sizeof *r->optim_ms_rank);
    ZY_TRY(comm_all_gather(&s->ranks.comm, &r->phase_ms[ZY_PHASE_OPTIM], r->optim_ms_rank, 1,
                           ZY_COMM_F64));
    s->ctx.prof = uc->prof = 0;
    zy_op_time t[2 * BT_PROF_MAX];
    int n = ops_prof_read(&s->ctx, t, BT_PROF_MAX);
    if (uc != &s->ctx && uc->device == ZY_DEV_CUDA) /* each its own (the CPU's is global) */
        n = merge_times(t, n, ops_prof_read(uc, t + n, BT_PROF_MAX));
    r->ops = zy_calloc((size_t)(n > 0 ? n : 1), sizeof *r->ops);
    for (int i = 0; i < n; i++) {
        bench_train_op *x = &r->ops[r->nops++];
        snprintf(x->op, sizeof x->op, "%s", t[i].name ? t[i].name : "?");
        x->calls = t[i].calls;
        x->ms_per_step = t[i].ms;
        x->pct = r->prof_step_ms > 0 ? 100.0 * t[i].ms / r->prof_step_ms : 0;
    }
    if (o->progress) {
        fprintf(o->progress, "profiled step: %.2f ms, loss %.4f\n", r->prof_step_ms, loss);
        fflush(o->progress);
    }
    return ZY_OK;
}

/* Under a launcher each rank takes its own GPU (its local rank) or its share of the host's cores,
 * and only rank 0 reports progress. */
static void bt_rank_opts(bench_train_opts *o, const dist_env *e) {
    if (e->world == 1) return;
    if (o->device == ZY_DEV_CUDA) o->gpu = ranks_local_gpu(e);
    const int per_host = e->local_world > 0 ? e->local_world : e->world;
    if (o->device == ZY_DEV_CPU && o->threads == 0)
        o->threads = omp_get_num_procs() / per_host > 0 ? omp_get_num_procs() / per_host : 1;
    if (e->rank != 0) o->progress = NULL;
}

int bench_train_run(const bench_train_opts *opts, bench_train_result *r) {
    memset(r, 0, sizeof *r);
    r->peak_tflops = r->mfu = r->device_used_gib = r->acts_bytes = r->prof_step_ms = NAN;
    r->acts_estimate = r->workspace_estimate = NAN;
    r->loss_first = r->loss_last = NAN;
    r->world = 1;
    bench_machine_host(&r->machine);
    ZY_TRY(bench_train_check(opts));
    dist_env e;
    ZY_TRY(dist_env_from_environ(&e));
    bench_train_opts local = *opts;
    const bench_train_opts *o = &local;
    bt_rank_opts(&local, &e);
    r->world = e.world;
    r->rank = e.rank;
    r->tokens_per_step = (int64_t)o->batch * o->seq * e.world; /* of every rank */
    r->flops_per_token = model_train_flops_per_token(&o->model, o->seq);
    r->counts = model_count_params(&o->model);
    if (o->peak_tflops > 0) r->peak_tflops = o->peak_tflops;
    double used0 = 0;
    if (o->device == ZY_DEV_CUDA) {
        int n = ops_cuda_device_count();
        if (o->gpu >= n)
            return zy_fail_runtime("device cuda:%d: %d CUDA GPU%s visible to this process", o->gpu,
                                   n, n == 1 ? "" : "s");
        ZY_TRY(bench_gpu_describe(&r->machine, o->gpu));
        if (!(o->peak_tflops > 0)) {
            if (o->progress) {
                fprintf(o->progress, "# measuring the bf16 matmul peak (8192^3 GEMM)\n");
                fflush(o->progress);
            }
            ZY_TRY(bt_measure_peak(o->gpu, &r->peak_tflops));
            r->peak_measured = 1;
        }
        size_t fr, tot;
        ZY_TRY(bench_train_gpu_mem(o->gpu, &fr, &tot));
        used0 = (double)(tot - fr);
    }
    bt_state s;
    int rc = bt_init(&s, o, &e, r);
    if (rc == ZY_OK) rc = bt_timed(&s, r, used0);
    if (rc == ZY_OK && o->profile) rc = bt_profiled(&s, r);
    bt_free(&s);
    return rc;
}

void bench_train_result_free(bench_train_result *r) {
    free(r->step_ms);
    free(r->ops);
    free(r->optim_ms_rank);
    r->step_ms = NULL;
    r->ops = NULL;
    r->optim_ms_rank = NULL;
    r->nsteps = r->nops = 0;
}

/* ------------------------------------------------------------------ output */

static const char *device_name(const bench_train_opts *o) {
    return o->device == ZY_DEV_CUDA ? "cuda" : "cpu";
}

/* Median of the timed steps (a copy is sorted). */
static double median_ms(const bench_train_result *r) {
    if (r->nsteps < 1) return NAN;
    double *v = zy_malloc((size_t)r->nsteps * sizeof *v);
    memcpy(v, r->step_ms, (size_t)r->nsteps * sizeof *v);
    qsort(v, (size_t)r->nsteps, sizeof *v, cmp_double);
    double m = r->nsteps % 2 ? v[r->nsteps / 2] : 0.5 * (v[r->nsteps / 2 - 1] + v[r->nsteps / 2]);
    free(v);
    return m;
}

void bench_train_print(FILE *f, const bench_train_opts *o, const bench_train_result *r) {
    char optim[128] = "AdamW";
    if (o->use_muon)
        snprintf(optim, sizeof optim,
                 "Muon (%d Newton-Schulz steps, %s coefficients, %s start) + AdamW", o->ns_steps,
                 zy_ns_coefs_names[o->ns_coefs], zy_ns_precond_names[o->ns_precond]);
    if (o->adam_moments != ZY_ADAM_MOMENTS_F32) {
        const size_t len = strlen(optim);
        snprintf(optim + len, sizeof optim - len, " (AdamW moments in %s)",
                 zy_adam_moments_names[o->adam_moments]);
    }
    if (o->use_muon && o->muon_momentum_dtype != ZY_ADAM_MOMENTS_F32) {
        const size_t len = strlen(optim);
        snprintf(optim + len, sizeof optim - len, " (Muon momentum in %s)",
                 zy_adam_moments_names[o->muon_momentum_dtype]);
    }
    fprintf(f,
            "# zayac bench train: %s on %s, batch %d x %d = %lld tokens/step, %s, lr %g, "
            "%d timed steps after %d warm-up%s\n",
            o->model_name, device_name(o), o->batch, o->seq, (long long)r->tokens_per_step, optim,
            o->lr, o->steps, o->warmup, o->recompute ? ", activations recomputed" : "");
    if (r->machine.gpu[0]) fprintf(f, "# gpu: %s\n", r->machine.gpu);
    fprintf(f, "  %-16s %.2fM total, %.2fM active per token without the embedding\n", "parameters",
            r->counts.total / 1e6, r->counts.active_no_embed / 1e6);
    fprintf(f, "  %-16s %.2f ms mean, %.2f median, %.2f min, %.2f max\n", "step time",
            r->step_ms_mean, median_ms(r), r->step_ms_min, r->step_ms_max);
    if (r->world > 1)
        fprintf(f,
                "  %-16s %d data-parallel (batch per rank %d; a step lasts as long as its "
                "slowest rank)\n",
                "ranks", r->world, o->batch);
    fprintf(f, "  %-16s %.0f", "tokens/s", r->tokens_per_s);
    if (r->world > 1) fprintf(f, " (%.0f per rank)", r->tokens_per_s / r->world);
    fprintf(f, "\n");
    fprintf(f, "  %-16s %.2f (%.3f GFLOP per token)\n", "model TFLOP/s", r->model_tflops,
            r->flops_per_token / 1e9);
    if (isfinite(r->mfu))
        fprintf(f, "  %-16s %.1f%% of %.1f TFLOP/s%s (%s)\n", "MFU", 100 * r->mfu, r->peak_tflops,
                r->world > 1 ? " per rank" : "",
                r->peak_measured ? "measured bf16 8192^3 GEMM" : "--peak-tflops");
    else
        fprintf(f, "  %-16s n/a (no measured peak on the CPU; --peak-tflops N sets one)\n", "MFU");
    if (o->device == ZY_DEV_CUDA)
        fprintf(f, "  %-16s %.2f GiB added by this run (device in use: %.2f GiB)\n", "memory",
                r->mem_gib, r->device_used_gib);
    else
        fprintf(f, "  %-16s %.2f GiB peak resident\n", "memory", r->mem_gib);
    fprintf(f, "  %-16s params %.3f GiB, grads %.3f GiB, optimizer %.3f GiB", "",
            r->params_bytes / GIB, r->grads_bytes / GIB, r->optim_bytes / GIB);
    if (isfinite(r->acts_bytes)) fprintf(f, ", activations %.3f GiB", r->acts_bytes / GIB);
    if (isfinite(r->acts_estimate))
        fprintf(f, "%s%.3f GiB estimated", isfinite(r->acts_bytes) ? " (" : ", activations ",
                r->acts_estimate / GIB);
    fprintf(f, "%s", isfinite(r->acts_bytes) && isfinite(r->acts_estimate) ? ")" : "");
    if (r->workspace_estimate > 0)
        fprintf(f, ", attention workspace up to %.3f GiB%s", r->workspace_estimate / GIB,
                o->cuda.attention_workspace_gib == ZY_ATTN_WORKSPACE_AUTO ? " (auto)" : "");
    fprintf(f, "\n");
    if (r->world > 1)
        fprintf(f,
                "  %-16s optimizer per rank %.3f to %.3f GiB of %.3f GiB over all ranks "
                "(ZeRO-1: each its tensors' share)\n",
                "", r->optim_bytes_min / GIB, r->optim_bytes / GIB, r->optim_bytes_all / GIB);
    if (r->muon_gather_bytes > 0)
        fprintf(f,
                "  %-16s distributed Muon: each matrix whole on its owner, no gradient gathered; "
                "all-gathering the Muon matrices' fp32 gradients instead would hold %.3f GiB more "
                "on every rank\n",
                "", r->muon_gather_bytes / GIB);
    fprintf(f, "  %-16s %.4f first step, %.4f last%s\n", "loss", r->loss_first, r->loss_last,
            r->nonfinite_steps ? " (some steps NOT FINITE)" : "");
    if (r->nsteps > 0)
        fprintf(f, "  %-16s busiest expert / mean: %.2f mean over layers and steps, %.2f worst\n",
                "expert load", r->load_ratio_mean, r->load_ratio_max);
    if (!isfinite(r->prof_step_ms)) return;
    fprintf(f, "# one profiled step: %.2f ms wall; phases (device synchronised between them):\n",
            r->prof_step_ms);
    fprintf(f, " ");
    for (int p = 0; p < ZY_STEP_NPHASES; p++)
        fprintf(f, " %s %.2f%s", step_phase_name(p), r->phase_ms[p],
                p + 1 < ZY_STEP_NPHASES ? " |" : "");
    fprintf(f, " ms\n");
    if (r->world > 1 && r->optim_ms_rank) {
        fprintf(f, "  optimizer phase per rank (ms):");
        for (int q = 0; q < r->world; q++) fprintf(f, " %.2f", r->optim_ms_rank[q]);
        fprintf(f, "\n");
    }
    fprintf(f, "  %-20s %7s %10s %6s\n", "op", "calls", "ms/step", "%");
    double sum = 0;
    for (int i = 0; i < r->nops; i++) {
        const bench_train_op *x = &r->ops[i];
        fprintf(f, "  %-20s %7ld %10.3f %6.1f\n", x->op, x->calls, x->ms_per_step, x->pct);
        sum += x->ms_per_step;
    }
    double rest = r->prof_step_ms - sum;
    fprintf(f, "  %-20s %7s %10.3f %6.1f\n", "(outside ops)", "", rest,
            r->prof_step_ms > 0 ? 100 * rest / r->prof_step_ms : 0.0);
}

static void add_num_or_null(cJSON *o, const char *k, double v) {
    if (isfinite(v))
        cJSON_AddNumberToObject(o, k, v);
    else
        cJSON_AddNullToObject(o, k);
}

cJSON *bench_train_to_json(const bench_train_opts *o, const bench_train_result *r) {
    cJSON *j = cJSON_CreateObject();
    cJSON_AddStringToObject(j, "config", o->model_name);
    cJSON_AddStringToObject(j, "device", device_name(o));
    cJSON_AddNumberToObject(j, "world_size", r->world);
    cJSON_AddNumberToObject(j, "batch", o->batch); /* per rank */
    cJSON_AddNumberToObject(j, "seq", o->seq);
    cJSON_AddNumberToObject(j, "tokens_per_step", (double)r->tokens_per_step);
    cJSON_AddNumberToObject(j, "steps", o->steps);
    cJSON_AddNumberToObject(j, "warmup", o->warmup);
    cJSON_AddStringToObject(j, "optim", o->use_muon ? "muon" : "adamw");
    cJSON_AddStringToObject(j, "adam_moments", zy_adam_moments_names[o->adam_moments]);
    cJSON_AddStringToObject(j, "muon_momentum_dtype",
                            zy_adam_moments_names[o->muon_momentum_dtype]);
    if (o->use_muon) {
        cJSON_AddNumberToObject(j, "ns_steps", o->ns_steps);
        cJSON_AddStringToObject(j, "ns_coefficients", zy_ns_coefs_names[o->ns_coefs]);
        cJSON_AddStringToObject(j, "ns_precondition", zy_ns_precond_names[o->ns_precond]);
    }
    cJSON_AddBoolToObject(j, "recompute", o->recompute);
    if (r->world > 1) /* what ranks do; one rank updates everything */
        cJSON_AddStringToObject(j, "embedding_update",
                                zy_embedding_update_names[o->embedding_update]);
    cJSON_AddNumberToObject(j, "lr", o->lr);
    cJSON_AddNumberToObject(j, "seed", (double)o->seed);
    cJSON_AddNumberToObject(j, "expert_streams", o->cuda.expert_streams);
    cJSON_AddNumberToObject(j, "expert_chunk", o->cuda.expert_chunk);
    cJSON_AddStringToObject(j, "attention", zy_attention_backend_names[o->cuda.attention]);
    /* what ran: one GPU (ZeRO-1 shares the weights instead; the CPU's ops run in order) */
    cJSON_AddBoolToObject(j, "overlap_optimizer",
                          step_overlaps(o->cuda.overlap_optimizer, r->world) &&
                              o->device == ZY_DEV_CUDA);
    if (o->cuda.attention_workspace_gib == ZY_ATTN_WORKSPACE_AUTO)
        cJSON_AddStringToObject(j, "attention_workspace_gib", "auto");
    else
        cJSON_AddNumberToObject(j, "attention_workspace_gib", o->cuda.attention_workspace_gib);
    cJSON *sm = cJSON_AddObjectToObject(j, "step_ms");
    add_num_or_null(sm, "mean", r->step_ms_mean);
    add_num_or_null(sm, "median", median_ms(r));
    add_num_or_null(sm, "min", r->step_ms_min);
    add_num_or_null(sm, "max", r->step_ms_max);
    cJSON *all = cJSON_AddArrayToObject(sm, "all");
    for (int i = 0; i < r->nsteps; i++)
        cJSON_AddItemToArray(all, cJSON_CreateNumber(r->step_ms[i]));
    add_num_or_null(j, "tokens_per_s", r->tokens_per_s);
    add_num_or_null(j, "tokens_per_s_per_rank", r->tokens_per_s / r->world);
    add_num_or_null(j, "flops_per_token", r->flops_per_token);
    add_num_or_null(j, "model_tflops", r->model_tflops);
    add_num_or_null(j, "mfu", r->mfu);
    add_num_or_null(j, "peak_tflops", r->peak_tflops);
    if (isfinite(r->peak_tflops))
        cJSON_AddStringToObject(j, "peak_source", r->peak_measured ? "measured" : "given");
    else
        cJSON_AddNullToObject(j, "peak_source");
    add_num_or_null(j, "mem_gib", r->mem_gib);
    cJSON *mem = cJSON_AddObjectToObject(j, "memory");
    cJSON_AddStringToObject(mem, "mem_gib_is",
                            o->device == ZY_DEV_CUDA ? "device memory added by this run"
                                                     : "peak resident set of the process");
    add_num_or_null(mem, "device_used_gib", r->device_used_gib);
    add_num_or_null(mem, "params_bytes", r->params_bytes);
    add_num_or_null(mem, "grads_bytes", r->grads_bytes);
    add_num_or_null(mem, "optimizer_bytes", r->optim_bytes); /* the largest rank's */
    add_num_or_null(mem, "optimizer_bytes_min_rank", r->optim_bytes_min);
    add_num_or_null(mem, "optimizer_bytes_all_ranks", r->optim_bytes_all);
    add_num_or_null(mem, "muon_gradient_gather_bytes", r->muon_gather_bytes);
    add_num_or_null(mem, "activations_bytes", r->acts_bytes);
    add_num_or_null(mem, "activations_estimate_bytes", r->acts_estimate);
    add_num_or_null(mem, "attention_workspace_estimate_bytes", r->workspace_estimate);
    cJSON *pc = cJSON_AddObjectToObject(j, "params");
    cJSON_AddNumberToObject(pc, "total", (double)r->counts.total);
    cJSON_AddNumberToObject(pc, "embedding", (double)r->counts.embedding);
    cJSON_AddNumberToObject(pc, "active_no_embed", (double)r->counts.active_no_embed);
    cJSON *lo = cJSON_AddObjectToObject(j, "loss");
    add_num_or_null(lo, "first", r->loss_first);
    add_num_or_null(lo, "last", r->loss_last);
    cJSON_AddNumberToObject(lo, "nonfinite_steps", r->nonfinite_steps);
    if (r->optim_ms_rank) {
        cJSON *om = cJSON_AddArrayToObject(j, "optimizer_ms_per_rank");
        for (int q = 0; q < r->world; q++)
            cJSON_AddItemToArray(om, cJSON_CreateNumber(r->optim_ms_rank[q]));
    }
    cJSON *el = cJSON_AddObjectToObject(j, "expert_load");
    cJSON_AddNumberToObject(el, "busiest_over_mean", r->load_ratio_mean);
    cJSON_AddNumberToObject(el, "busiest_over_mean_worst", r->load_ratio_max);
    add_num_or_null(j, "profiled_step_ms", r->prof_step_ms);
    cJSON *ph = cJSON_AddObjectToObject(j, "phases_ms");
    if (isfinite(r->prof_step_ms))
        for (int p = 0; p < ZY_STEP_NPHASES; p++)
            cJSON_AddNumberToObject(ph, step_phase_name(p), r->phase_ms[p]);
    cJSON *bd = cJSON_AddArrayToObject(j, "breakdown");
    for (int i = 0; i < r->nops; i++) {
        cJSON *x = cJSON_CreateObject();
        cJSON_AddStringToObject(x, "op", r->ops[i].op);
        cJSON_AddNumberToObject(x, "calls", (double)r->ops[i].calls);
        cJSON_AddNumberToObject(x, "ms_per_step", r->ops[i].ms_per_step);
        cJSON_AddNumberToObject(x, "pct", r->ops[i].pct);
        cJSON_AddItemToArray(bd, x);
    }
    cJSON_AddItemToObject(j, "machine", bench_machine_to_json(&r->machine));
    return j;
}

int bench_train_write(const char *path, const bench_train_opts *o, const bench_train_result *r) {
    char dir[4096];
    snprintf(dir, sizeof dir, "%s", path);
    char *slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        ZY_TRY(zy_mkdirs(dir));
    }
    cJSON *j = bench_train_to_json(o, r);
    int rc = bench_write_json(path, j);
    cJSON_Delete(j);
    return rc;
}

#ifndef ZY_HAVE_CUDA
int bench_train_gpu_mem(int dev, size_t *free_bytes, size_t *total_bytes) {
    *free_bytes = *total_bytes = 0;
    return zy_fail("device cuda:%d: this zayac was built without CUDA", dev);
}
#endif
