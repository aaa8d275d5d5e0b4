/* zayac bench: the machine benchmarks. `bench collectives` (NCCL, one process per GPU, started by
 * `zayac launch`, mpirun, srun or torchrun-style variables), `bench gemm` (cuBLASLt by shape) and
 * `bench membw` (device and host copies). Option parsing and output only; src/bench does the work.
 */
#include "args.h"
#include "base/err.h"
#include "base/fileio.h"
#include "bench/coll.h"
#include "bench/gemm.h"
#include "bench/membw.h"
#include "bench/train_bench.h"
#include "bench/util.h"
#include "cmds.h"
#include "dist/env.h"
#include "dist/rdv.h"
#include "model_cli.h"
#include "optim/ns_coef.h"

#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* nccl-tests' short options, rewritten to their long names before parsing. */
typedef struct {
    const char *shrt, *lng;
} short_alias;

static char **expand_short(int argc, char **argv, const short_alias *al) {
    char **out = zy_calloc((size_t)argc + 1, sizeof(char *));
    for (int i = 0; i < argc; i++) {
        out[i] = argv[i];
        for (const short_alias *a = al; a && a->shrt; a++)
            if (i > 0 && !strcmp(argv[i], a->shrt)) out[i] = (char *)a->lng;
    }
    return out;
}

/* A device index from --device, or -1. */
static int opt_device(const zy_opt *opts, long long *dev) {
    return args_int_in(opts, "--device", -1, 0, 4095, dev);
}

/* ------------------------------------------------------------------ bench collectives */

typedef struct {
    int rank;
    long long kill_rank, kill_bytes, kill_signal;
} kill_hook;

/* Test hook: ZAYAC_DEBUG_KILL="RANK:BYTES[:SIGNAL]" sends that rank SIGNAL (default SIGKILL; 19 =
 * SIGSTOP, a hung process) when the sweep reaches BYTES, to show that its peers then end with an
 * error instead of hanging. */
static void maybe_die(size_t bytes, void *ctx) {
    kill_hook *h = ctx;
    if (h->kill_rank == h->rank && (long long)bytes >= h->kill_bytes) {
        fprintf(stderr,
                "zayac bench collectives: rank %d: ZAYAC_DEBUG_KILL: signal %lld at %zu "
                "bytes\n",
                h->rank, h->kill_signal, bytes);
        fflush(stderr);
        h->kill_rank = -1; /* once (a stopped process may be continued) */
        raise((int)h->kill_signal);
    }
}

/* The watchdog's report of a hung NCCL call or a dead peer: this process cannot continue (the
 * call will not return), so it says why and exits; its peers see it go and stop too. */
static void coll_stuck(const char *msg, void *ctx) {
    fprintf(stderr, "zayac bench collectives: rank %d: %s\n", *(int *)ctx, msg);
    fflush(stderr);
    _exit(1);
}

static int parse_coll_opts(zy_opt *opts, bench_coll_opts *o) {
    long long v;
    const char *s;
    if ((s = args_get(opts, "--min-bytes")) && bench_parse_bytes(s, &o->min_bytes) != ZY_OK)
        return ZY_ERR;
    if ((s = args_get(opts, "--max-bytes")) && bench_parse_bytes(s, &o->max_bytes) != ZY_OK)
        return ZY_ERR;
    ZY_TRY(args_int_in(opts, "--factor", 2, 2, 1 << 30, &v));
    o->factor = (size_t)v;
    ZY_TRY(args_int_in(opts, "--warmup", o->warmup, 0, 100000, &v));
    o->warmup = (int)v;
    ZY_TRY(args_int_in(opts, "--iters", o->iters, 1, 1000000, &v));
    o->iters = (int)v;
    ZY_TRY(args_int_in(opts, "--check", 1, 0, 1, &v));
    o->check = v != 0;
    ZY_TRY(args_int_in(opts, "--root", 0, 0, 4095, &v));
    o->root = (int)v;
    ZY_TRY(args_double_in(opts, "--timeout", o->timeout_s, "(0, inf)", &o->timeout_s));
    if ((s = args_get(opts, "--ops"))) {
        char buf[256], *items[COLL_NKINDS * 2];
        int n;
        snprintf(buf, sizeof buf, "%s", s);
        ZY_TRY(bench_split_list(buf, items, COLL_NKINDS * 2, &n));
        if (n == 0) return zy_fail("--ops: empty list");
        o->ncolls = 0;
        for (int i = 0; i < n; i++) {
            bench_coll_kind k;
            ZY_TRY(bench_coll_parse(items[i], &k));
            if (o->ncolls >= COLL_NKINDS) return zy_fail("--ops: too many collectives");
            o->colls[o->ncolls++] = k;
        }
    }
    if ((s = args_get(opts, "--dtypes"))) {
        char buf[64], *items[4];
        int n;
        snprintf(buf, sizeof buf, "%s", s);
        ZY_TRY(bench_split_list(buf, items, 4, &n));
        if (n == 0 || n > 2) return zy_fail("--dtypes: expected bf16, fp32 or bf16,fp32");
        for (int i = 0; i < n; i++) {
            ZY_TRY(bench_dtype_parse(items[i], &o->dtypes[i]));
            if (o->dtypes[i] == BENCH_TF32) return zy_fail("--dtypes: tf32 is a GEMM mode only");
        }
        o->ndtypes = n;
    }
    static const char *const placements[] = {"out", "in", "both", NULL}; /* o->placement 0, 1, 2 */
    ZY_TRY(args_choice(opts, "--placement", placements, o->placement, &o->placement));
    if ((s = args_get(opts, "--out"))) o->out_dir = s;
    o->nonblocking = args_get(opts, "--nccl-nonblocking") != NULL;
    size_t *sizes;
    int n;
    ZY_TRY(bench_sizes(o->min_bytes, o->max_bytes, o->factor, &sizes, &n));
    free(sizes);
    return ZY_OK;
}

/* --combine: plots several result files (one line per GPU count) and prints their peaks. */
static int coll_combine(const char *out_dir, const char **files, int nfiles) {
    if (nfiles == 0) return zy_fail("--combine needs result files (collectives_n*.json)");
    bench_coll_result *res = zy_calloc((size_t)nfiles, sizeof *res);
    int rc = ZY_OK, nread = 0;
    for (int i = 0; i < nfiles && rc == ZY_OK; i++) {
        rc = bench_coll_read(files[i], &res[i]);
        if (rc == ZY_OK) nread++;
    }
    for (int i = 0; i < nread && rc == ZY_OK; i++) bench_coll_print_summary(stdout, &res[i]);
    if (rc == ZY_OK) rc = bench_coll_plot(out_dir, res, nread);
    if (rc == ZY_OK) printf("# plots written to %s/busbw_<collective>_<dtype>.png\n", out_dir);
    for (int i = 0; i < nread; i++) bench_coll_result_free(&res[i]);
    free(res);
    return rc;
}

/* "zayac bench collectives: rank R: <error>"; returns the exit status of the error's kind. */
static int rank_error(int rank) {
    fprintf(stderr, "zayac bench collectives: rank %d: %s\n", rank, zy_errmsg());
    return zy_err_exit_status();
}

static int bench_collectives(int argc, char **argv) {
    static const short_alias al[] = {
        {"-b", "--min-bytes"}, {"-e", "--max-bytes"}, {"-f", "--factor"}, {"-n", "--iters"},
        {"-w", "--warmup"},    {"-c", "--check"},     {"-d", "--dtypes"}, {"-r", "--root"},
        {"-o", "--out"},       {NULL, NULL}};
    zy_opt opts[] = {
        {"--min-bytes", 1, "-b: smallest message (bytes; K/M/G suffixes; default 8)", NULL},
        {"--max-bytes", 1, "-e: largest message (default 128M)", NULL},
        {"--factor", 1, "-f: size multiplier between steps (default 2)", NULL},
        {"--warmup", 1, "-w: warm-up operations per size (default 5)", NULL},
        {"--iters", 1, "-n: timed operations per size (default 20)", NULL},
        {"--ops", 1,
         "collectives (default all_reduce,reduce_scatter,all_gather,broadcast,"
         "alltoall)",
         NULL},
        {"--dtypes", 1, "-d: bf16, fp32 or bf16,fp32 (default bf16)", NULL},
        {"--placement", 1, "out, in or both (default both)", NULL},
        {"--check", 1, "-c: 1 = count wrong elements after timing, 0 = skip (default 1)", NULL},
        {"--root", 1, "-r: broadcast root (default 0)", NULL},
        {"--timeout", 1, "seconds any rendezvous or wait may take before failing (default 300)",
         NULL},
        {"--device", 1, "CUDA device (default: local rank modulo the visible devices)", NULL},
        {"--nccl-nonblocking", 0, "create the communicator non-blocking (slower per call)", NULL},
        {"--out", 1, "-o: folder for collectives_n<N>.json/.csv and plots (default zayac-bench)",
         NULL},
        {"--combine", 0, "plot result files given as arguments (one line per GPU count)", NULL},
        {"--help", 0, "this help", NULL},
        {NULL, 0, NULL, NULL}};
    const char *synopsis = "[options]   (one process per GPU: zayac launch -n N -- "
                           "zayac bench collectives ...; or mpirun / srun / RANK+WORLD_SIZE+"
                           "MASTER_ADDR+MASTER_PORT)";
    char **av = expand_short(argc, argv, al);
    const char *files[64];
    int nfiles = 0;
    int done = args_cli("bench collectives", synopsis, opts, argc, av, files, 64, &nfiles);
    free(av);
    if (done != ARGS_RUN) return done;
    bench_coll_opts o;
    bench_coll_opts_default(&o);
    if (parse_coll_opts(opts, &o) != ZY_OK) return cli_error("bench collectives");
    if (args_get(opts, "--combine"))
        return coll_combine(o.out_dir, files, nfiles) == ZY_OK ? 0 : cli_error("bench collectives");
    if (nfiles) {
        zy_fail("unexpected argument '%s' (result files are only read with --combine)", files[0]);
        return cli_error("bench collectives");
    }
    long long devopt;
    if (opt_device(opts, &devopt) != ZY_OK) return cli_error("bench collectives");

    int ngpu;
    if (bench_gpu_count(&ngpu) != ZY_OK) return cli_error("bench collectives");
    dist_env env;
    if (dist_env_from_environ(&env) != ZY_OK) return cli_error("bench collectives");
    dist_rdv rdv;
    if (dist_rdv_init(&rdv, env.rank, env.world, env.master_addr, env.master_port, o.timeout_s) !=
        ZY_OK)
        return rank_error(env.rank);
    /* Host names: the local rank when the launcher did not say, and the node count. */
    char me[64] = {0};
    gethostname(me, sizeof me - 1);
    char *hosts = zy_calloc((size_t)env.world, sizeof me);
    int rc = dist_rdv_allgather(&rdv, me, sizeof me, hosts);
    int nnodes = 0;
    if (rc == ZY_OK) {
        int lr, lw;
        dist_local_from_hosts(hosts, sizeof me, env.world, env.rank, &lr, &lw);
        if (env.local_rank < 0) env.local_rank = lr, env.local_world = lw;
        for (int r = 0; r < env.world; r++) {
            int lr2, lw2;
            dist_local_from_hosts(hosts, sizeof me, env.world, r, &lr2, &lw2);
            if (lr2 == 0) nnodes++;
        }
    }
    free(hosts);
    int device = devopt >= 0 ? (int)devopt : env.local_rank % ngpu;
    if (rc == ZY_OK && devopt >= ngpu)
        rc = zy_fail("--device %lld: only %d device(s) visible", devopt, ngpu);
    if (rc == ZY_OK && env.rank == 0) {
        printf("# zayac bench collectives: %d rank(s) on %d node(s) (%s), rendezvous %s, "
               "sizes %zu..%zu x%zu, %d warm-up + %d timed operations\n",
               env.world, nnodes, env.source, rdv.where, o.min_bytes, o.max_bytes, o.factor,
               o.warmup, o.iters);
        if (env.local_world > ngpu)
            printf("# warning: %d ranks on this host share %d GPU(s)\n", env.local_world, ngpu);
        fflush(stdout);
    }
    o.on_stuck = coll_stuck;
    o.stuck_ctx = &env.rank;
    kill_hook hook = {env.rank, -1, 0, SIGKILL};
    const char *dk = getenv("ZAYAC_DEBUG_KILL");
    if (dk) sscanf(dk, "%lld:%lld:%lld", &hook.kill_rank, &hook.kill_bytes, &hook.kill_signal);
    bench_coll_result res;
    bench_coll_result_init(&res);
    if (rc == ZY_OK)
        rc = bench_coll_run(&o, &rdv, device, &res, env.rank == 0 ? stdout : NULL,
                            dk ? maybe_die : NULL, &hook);
    if (rc != ZY_OK) {
        int status = rank_error(env.rank);
        dist_rdv_free(&rdv);
        bench_coll_result_free(&res);
        return status;
    }
    res.nnodes = nnodes;
    int code = 0;
    if (env.rank == 0) {
        bench_coll_print_summary(stdout, &res);
        bench_machine_print(stdout, &res.machine);
        if (bench_coll_write(o.out_dir, &res) != ZY_OK)
            code = cli_error("bench collectives");
        else if (bench_coll_plot(o.out_dir, &res, 1) != ZY_OK)
            code = cli_error("bench collectives");
        else
            printf("# wrote %s/collectives_n%d.json, .csv and busbw_*.png\n", o.out_dir, env.world);
    }
    int64_t bad = 0;
    for (int i = 0; i < res.nrows; i++)
        if (res.rows[i].wrong > 0) bad += res.rows[i].wrong;
    if (bad && !code) {
        if (env.rank == 0)
            fprintf(stderr, "zayac bench collectives: %lld wrong elements\n", (long long)bad);
        code = ZY_EXIT_RUNTIME; /* the hardware or the library computed wrong results */
    }
    if (dist_rdv_barrier(&rdv) != ZY_OK && !code) code = rank_error(env.rank);
    dist_rdv_free(&rdv);
    bench_coll_result_free(&res);
    return code;
}

/* ------------------------------------------------------------------ bench gemm */

static int bench_gemm(int argc, char **argv) {
    static const short_alias al[] = {{"-o", "--out"}, {NULL, NULL}};
    zy_opt opts[] = {
        {"--dtypes", 1, "bf16, tf32, fp32 (comma-separated; default all three)", NULL},
        {"--presets", 1, "model presets whose GEMMs are timed (default bench-small,zaya1-base)",
         NULL},
        {"--tokens", 1, "tokens per step for the preset shapes (default 16384)", NULL},
        {"--target-ms", 1, "timed run length per shape in ms (default 50)", NULL},
        {"--warmup-ms", 1, "sustained load before timing each shape in ms (default 50)", NULL},
        {"--algos", 1, "cuBLASLt heuristic candidates tried per shape, best kept (default 1)",
         NULL},
        {"--workspace", 1, "cuBLASLt workspace bytes (default 32M)", NULL},
        {"--no-check", 0, "skip comparing sampled outputs with a float64 reference", NULL},
        {"--quick", 0, "squares and preset shapes only", NULL},
        {"--shapes", 1, "only these: MxNxK[:xwt|xw|xtw],... (Y = X W^T, X W, X^T W)", NULL},
        {"--device", 1, "CUDA device (default 0)", NULL},
        {"--out", 1, "-o: folder for gemm.json and the heatmaps (default zayac-bench)", NULL},
        {"--help", 0, "this help", NULL},
        {NULL, 0, NULL, NULL}};
    char **av = expand_short(argc, argv, al);
    int done = args_cli("bench gemm", "[options]", opts, argc, av, NULL, 0, NULL);
    free(av);
    if (done != ARGS_RUN) return done;
    bench_gemm_opts o;
    bench_gemm_opts_default(&o);
    const char *s;
    long long v;
    if ((s = args_get(opts, "--dtypes"))) {
        char buf[64], *items[4];
        int n;
        snprintf(buf, sizeof buf, "%s", s);
        if (bench_split_list(buf, items, 3, &n) != ZY_OK) return cli_error("bench gemm");
        if (n == 0) {
            zy_fail("--dtypes: empty list");
            return cli_error("bench gemm");
        }
        for (int i = 0; i < n; i++)
            if (bench_dtype_parse(items[i], &o.dtypes[i]) != ZY_OK) return cli_error("bench gemm");
        o.ndtypes = n;
    }
    if ((s = args_get(opts, "--presets"))) snprintf(o.presets, sizeof o.presets, "%s", s);
    long long algos;
    if (args_int_in(opts, "--tokens", o.tokens, 1, 1 << 24, &v) != ZY_OK ||
        args_double_in(opts, "--target-ms", o.target_ms, "(0, inf)", &o.target_ms) != ZY_OK ||
        args_double_in(opts, "--warmup-ms", o.warmup_ms, "[0, inf)", &o.warmup_ms) != ZY_OK ||
        args_int_in(opts, "--algos", 1, 1, 8, &algos) != ZY_OK)
        return cli_error("bench gemm");
    o.tokens = (int)v;
    o.algos = (int)algos;
    if ((s = args_get(opts, "--workspace")) && bench_parse_bytes(s, &o.workspace) != ZY_OK)
        return cli_error("bench gemm");
    o.check = !args_get(opts, "--no-check");
    o.quick = args_get(opts, "--quick") != NULL;
    if ((s = args_get(opts, "--out"))) o.out_dir = s;
    bench_gemm_shape custom[64];
    if ((s = args_get(opts, "--shapes"))) {
        char buf[2048], *items[64];
        int n;
        snprintf(buf, sizeof buf, "%s", s);
        if (bench_split_list(buf, items, 64, &n) != ZY_OK) return cli_error("bench gemm");
        if (n == 0) {
            zy_fail("--shapes: empty list");
            return cli_error("bench gemm");
        }
        for (int i = 0; i < n; i++)
            if (bench_gemm_parse_shape(items[i], &custom[i]) != ZY_OK)
                return cli_error("bench gemm");
        o.shapes = custom;
        o.nshapes = n;
    }
    /* The preset names are checked before any GPU work. */
    for (int d = 0; d < o.ndtypes; d++) {
        bench_gemm_shape *shapes;
        int n;
        if (bench_gemm_sweep(&o, o.dtypes[d], &shapes, &n) != ZY_OK) return cli_error("bench gemm");
        free(shapes);
    }
    long long dev;
    if (opt_device(opts, &dev) != ZY_OK) return cli_error("bench gemm");
    int ngpu;
    if (bench_gpu_count(&ngpu) != ZY_OK) return cli_error("bench gemm");
    if (dev < 0) dev = 0;
    if (dev >= ngpu) {
        zy_fail("--device %lld: only %d device(s) visible", dev, ngpu);
        return cli_error("bench gemm");
    }
    bench_gemm_result res;
    if (bench_gemm_run(&o, (int)dev, &res, stdout) != ZY_OK) {
        bench_gemm_result_free(&res);
        return cli_error("bench gemm");
    }
    bench_gemm_observations(stdout, &res);
    bench_machine_print(stdout, &res.machine);
    int code = 0;
    if (bench_gemm_write(o.out_dir, &res) != ZY_OK || bench_gemm_plot(o.out_dir, &res) != ZY_OK)
        code = cli_error("bench gemm");
    else
        printf("# wrote %s/gemm.json and gemm_*.png\n", o.out_dir);
    for (int i = 0; i < res.nrows; i++)
        if (res.rows[i].check_bad > 0 && !code) {
            fprintf(stderr, "zayac bench gemm: sampled outputs outside tolerance (see 'check')\n");
            code = ZY_EXIT_RUNTIME; /* wrong results: a hardware or library fault */
        }
    bench_gemm_result_free(&res);
    return code;
}

/* ------------------------------------------------------------------ bench membw */

static int bench_membw(int argc, char **argv) {
    static const short_alias al[] = {
        {"-b", "--min-bytes"}, {"-e", "--max-bytes"}, {"-o", "--out"}, {NULL, NULL}};
    zy_opt opts[] = {
        {"--min-bytes", 1, "-b: smallest device array (default 256K)", NULL},
        {"--max-bytes", 1, "-e: largest device array (default 4G; three arrays are allocated)",
         NULL},
        {"--host-min-bytes", 1, "smallest host copy (default 64K)", NULL},
        {"--host-max-bytes", 1, "largest host copy (default 1G; 0 = no host copies)", NULL},
        {"--target-ms", 1, "timed run length per point in ms (default 20)", NULL},
        {"--device", 1, "CUDA device (default 0)", NULL},
        {"--out", 1, "-o: folder for membw.json and plots (default zayac-bench)", NULL},
        {"--help", 0, "this help", NULL},
        {NULL, 0, NULL, NULL}};
    char **av = expand_short(argc, argv, al);
    int done = args_cli("bench membw", "[options]", opts, argc, av, NULL, 0, NULL);
    free(av);
    if (done != ARGS_RUN) return done;
    bench_membw_opts o;
    bench_membw_opts_default(&o);
    const char *s;
    if (((s = args_get(opts, "--min-bytes")) && bench_parse_bytes(s, &o.min_bytes) != ZY_OK) ||
        ((s = args_get(opts, "--max-bytes")) && bench_parse_bytes(s, &o.max_bytes) != ZY_OK) ||
        ((s = args_get(opts, "--host-min-bytes")) &&
         bench_parse_bytes(s, &o.host_min_bytes) != ZY_OK) ||
        ((s = args_get(opts, "--host-max-bytes")) &&
         bench_parse_bytes(s, &o.host_max_bytes) != ZY_OK) ||
        args_double_in(opts, "--target-ms", o.target_ms, "(0, inf)", &o.target_ms) != ZY_OK)
        return cli_error("bench membw");
    if (o.min_bytes < 16 || o.min_bytes % 16 || o.max_bytes % 16 || o.min_bytes > o.max_bytes ||
        (o.host_max_bytes && o.host_min_bytes > o.host_max_bytes) ||
        o.host_max_bytes > o.max_bytes) {
        zy_fail("sizes must be multiples of 16 bytes with min <= max and host max <= max");
        return cli_error("bench membw");
    }
    if ((s = args_get(opts, "--out"))) o.out_dir = s;
    long long dev;
    if (opt_device(opts, &dev) != ZY_OK) return cli_error("bench membw");
    int ngpu;
    if (bench_gpu_count(&ngpu) != ZY_OK) return cli_error("bench membw");
    if (dev < 0) dev = 0;
    if (dev >= ngpu) {
        zy_fail("--device %lld: only %d device(s) visible", dev, ngpu);
        return cli_error("bench membw");
    }
    bench_membw_result res;
    if (bench_membw_run(&o, (int)dev, &res, stdout) != ZY_OK) {
        bench_membw_result_free(&res);
        return cli_error("bench membw");
    }
    bench_machine_print(stdout, &res.machine);
    int code = 0;
    if (bench_membw_write(o.out_dir, &res) != ZY_OK || bench_membw_plot(o.out_dir, &res) != ZY_OK)
        code = cli_error("bench membw");
    else
        printf("# wrote %s/membw.json, membw_device.png and membw_host.png\n", o.out_dir);
    for (int i = 0; i < res.nrows; i++)
        if (res.rows[i].wrong > 0 && !code) {
            fprintf(stderr, "zayac bench membw: wrong results (see 'wrong')\n");
            code = ZY_EXIT_RUNTIME; /* wrong results: a hardware or library fault */
        }
    bench_membw_result_free(&res);
    return code;
}

/* ================================================================== bench train
 * The whole training step (src/bench/train_bench.h): a model from --config or --preset trained on
 * synthetic tokens; tokens/s, step time, model TFLOP/s, MFU, memory and the per-op breakdown. */

/* An integer option in [lo, hi] (default def when absent). */
static int train_opt_int(const zy_opt *opts, const char *name, long long def, long long lo,
                         long long hi, int *out) {
    long long v;
    ZY_TRY(args_int_in(opts, name, def, lo, hi, &v));
    *out = (int)v;
    return ZY_OK;
}

/* "cpu", "cuda" or "cuda:N"; absent: cuda when a GPU is visible, else cpu. */
static int train_opt_device(const char *s, zy_device *dev, int *gpu) {
    *gpu = 0;
    if (!s) {
        *dev = ops_cuda_device_count() > 0 ? ZY_DEV_CUDA : ZY_DEV_CPU;
        return ZY_OK;
    }
    if (!strcmp(s, "cpu")) {
        *dev = ZY_DEV_CPU;
        return ZY_OK;
    }
    if (!strcmp(s, "cuda")) {
        *dev = ZY_DEV_CUDA;
        return ZY_OK;
    }
    if (!strncmp(s, "cuda:", 5) && s[5] >= '0' && s[5] <= '9') {
        char *end;
        long g = strtol(s + 5, &end, 10);
        if (!*end && g < 4096) {
            *dev = ZY_DEV_CUDA;
            *gpu = (int)g;
            return ZY_OK;
        }
    }
    return zy_fail("--device '%s': expected cpu, cuda or cuda:N", s);
}

static int train_parse(const zy_opt *opts, bench_train_opts *o) {
    const char *config = args_get(opts, "--config"), *preset = args_get(opts, "--preset");
    if (config && preset) return zy_fail("give --config FILE or --preset NAME, not both");
    if (!config && !preset)
        return zy_fail("name a model: --config FILE (an HF config.json) or --preset NAME "
                       "(tiny, bench-small, bench-base, zaya1-base)");
    ZY_TRY(cli_config(&o->model, NULL, config, preset));
    snprintf(o->model_name, sizeof o->model_name, "%s", config ? config : preset);
    ZY_TRY(train_opt_device(args_get(opts, "--device"), &o->device, &o->gpu));
    ZY_TRY(train_opt_int(opts, "--batch", o->batch, 1, 65536, &o->batch));
    ZY_TRY(train_opt_int(opts, "--seq", o->seq, 1, 1 << 24, &o->seq));
    ZY_TRY(train_opt_int(opts, "--steps", o->steps, 1, 1000000, &o->steps));
    ZY_TRY(train_opt_int(opts, "--warmup", o->warmup, 0, 1000000, &o->warmup));
    ZY_TRY(train_opt_int(opts, "--threads", 0, 0, 4096, &o->threads));
    static const char *const optims[] = {"adamw", "muon", NULL}; /* use_muon 0, 1 */
    ZY_TRY(args_choice(opts, "--optim", optims, o->use_muon, &o->use_muon));
    if (args_get(opts, "--ns-steps") && !o->use_muon)
        return zy_fail("--ns-steps sets Muon's Newton-Schulz iterations: it needs --optim muon");
    ZY_TRY(train_opt_int(opts, "--ns-steps", o->ns_steps, 1, 100, &o->ns_steps));
    if (args_get(opts, "--ns-coefficients") && !o->use_muon)
        return zy_fail("--ns-coefficients sets Muon's Newton-Schulz coefficients: it needs --optim "
                       "muon");
    ZY_TRY(args_choice(opts, "--ns-coefficients", zy_ns_coefs_names, o->ns_coefs, &o->ns_coefs));
    if (args_get(opts, "--ns-precondition") && !o->use_muon)
        return zy_fail("--ns-precondition sets Muon's Newton-Schulz starting iterate: it needs "
                       "--optim muon");
    ZY_TRY(
        args_choice(opts, "--ns-precondition", zy_ns_precond_names, o->ns_precond, &o->ns_precond));
    ZY_TRY(args_choice(opts, "--adam-moments", zy_adam_moments_names, o->adam_moments,
                       &o->adam_moments));
    if (args_get(opts, "--muon-momentum-dtype") && !o->use_muon)
        return zy_fail(
            "--muon-momentum-dtype sets Muon's momentum precision: it needs --optim muon");
    ZY_TRY(args_choice(opts, "--muon-momentum-dtype", zy_adam_moments_names, o->muon_momentum_dtype,
                       &o->muon_momentum_dtype));
    double v;
    ZY_TRY(args_double_in(opts, "--lr", o->lr, "(0, 10]", &v));
    o->lr = (float)v;
    ZY_TRY(args_double_in(opts, "--peak-tflops", 0, "(0, 1e9)", &o->peak_tflops));
    long long seed;
    ZY_TRY(args_int_in(opts, "--seed", (long long)o->seed, 0, LLONG_MAX, &seed));
    o->seed = (uint64_t)seed;
    o->profile = args_get(opts, "--profile") != NULL;
    o->recompute = args_get(opts, "--recompute") != NULL;
    ZY_TRY(args_choice(opts, "--embedding-update", zy_embedding_update_names, o->embedding_update,
                       &o->embedding_update));
    ZY_TRY(train_opt_int(opts, "--expert-streams", o->cuda.expert_streams, 1, ZY_EXPERT_STREAMS_MAX,
                         &o->cuda.expert_streams));
    ZY_TRY(
        train_opt_int(opts, "--expert-chunk", o->cuda.expert_chunk, 0, 1, &o->cuda.expert_chunk));
    ZY_TRY(train_opt_int(opts, "--overlap-optimizer", o->cuda.overlap_optimizer, 0, 1,
                         &o->cuda.overlap_optimizer));
    ZY_TRY(args_choice(opts, "--attention", zy_attention_backend_names, o->cuda.attention,
                       &o->cuda.attention));
    const char *ws = args_get(opts, "--attention-workspace-gib");
    if (ws && !strcmp(ws, "auto")) {
        o->cuda.attention_workspace_gib = ZY_ATTN_WORKSPACE_AUTO;
    } else {
        ZY_TRY(args_double_in(opts, "--attention-workspace-gib", o->cuda.attention_workspace_gib,
                              "[0.0625, 64]", &v));
        o->cuda.attention_workspace_gib = (float)v;
    }
    return bench_train_check(o);
}

/* `bench train -n N` outside a launcher: runs itself as N ranks, `zayac launch -n N [--cpu] --
 * zayac bench train ARGS` without the -n. Returns only on failure. */
static int train_relaunch(int argc, char **argv, const char *n, int cpu) {
    char self[4096];
    ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    if (len <= 0) {
        zy_fail_errno("/proc/self/exe", "cannot find this zayac to launch it as ranks", errno);
        return cli_error("bench train");
    }
    self[len] = 0;
    char **args = zy_calloc((size_t)argc + 12, sizeof *args);
    int k = 0;
    args[k++] = self, args[k++] = "launch", args[k++] = "-n", args[k++] = (char *)n;
    if (cpu) args[k++] = "--cpu";
    args[k++] = "--", args[k++] = self, args[k++] = "bench";
    for (int i = 0; i < argc; i++) {
        if (!strcmp(argv[i], "-n")) {
            i++; /* and its value */
            continue;
        }
        args[k++] = argv[i];
    }
    args[k] = NULL;
    fflush(stdout);
    execv(self, args);
    zy_fail_errno(self, "cannot run zayac launch", errno);
    free(args);
    return cli_error("bench train");
}

static int bench_train(int argc, char **argv) {
    zy_opt opts[] = {
        {"-n", 1,
         "data-parallel ranks: runs under zayac launch (GPUs; CPU ranks over MPI); "
         "--batch is per rank",
         NULL},
        {"--config", 1, "model config.json (HF) to benchmark", NULL},
        {"--preset", 1, "model preset: tiny, bench-small, bench-base or zaya1-base", NULL},
        {"--device", 1, "cpu, cuda or cuda:N (default: cuda when a GPU is visible)", NULL},
        {"--batch", 1, "sequences per step (default 8)", NULL},
        {"--seq", 1, "tokens per sequence (default 2048)", NULL},
        {"--steps", 1, "timed steps (default 20)", NULL},
        {"--warmup", 1, "untimed steps before them (default 3)", NULL},
        {"--optim", 1, "adamw, or muon (Muon for the matrices) (default adamw)", NULL},
        {"--ns-steps", 1, "Muon's Newton-Schulz iterations (optimizer.ns_steps; default 5)", NULL},
        {"--ns-coefficients", 1,
         "fixed|minimax: Muon's Newton-Schulz coefficients (optimizer.ns_coefficients)", NULL},
        {"--ns-precondition", 1,
         "frobenius|aol: Muon's Newton-Schulz starting iterate (optimizer.ns_precondition)", NULL},
        {"--adam-moments", 1,
         "float32|bfloat16: AdamW's moments' precision (optimizer.adam_moments; default float32)",
         NULL},
        {"--muon-momentum-dtype", 1,
         "float32|bfloat16: Muon's momentum precision (optimizer.muon_momentum_dtype; default "
         "float32)",
         NULL},
        {"--lr", 1, "constant learning rate (default 3e-4)", NULL},
        {"--profile", 0, "one extra step with the op profiler: the per-op time breakdown", NULL},
        {"--recompute", 0,
         "activation recomputation (the recompute setting): each layer's forward again in the "
         "backward",
         NULL},
        {"--embedding-update", 1,
         "ranks: who updates the embedding: split (every rank a slice), owner or replicated "
         "(dist.embedding_update; default split)",
         NULL},
        {"--peak-tflops", 1, "bf16 peak for the MFU (default: measured, 8192^3 GEMM; CUDA only)",
         NULL},
        {"--json", 1, "also write the result as JSON to this file", NULL},
        {"--seed", 1, "seed of the weights and the synthetic tokens (default 1)", NULL},
        {"--threads", 1, "CPU threads (default: OpenMP's)", NULL},
        {"--expert-streams", 1, "CUDA streams the expert GEMMs share (cuda.expert_streams)", NULL},
        {"--expert-chunk", 1, "1: expert GEMMs by 256-row blocks (cuda.expert_chunk)", NULL},
        {"--overlap-optimizer", 1,
         "0: the update after the step; 1: beside the next forward (cuda.overlap_optimizer; "
         "default 1)",
         NULL},
        {"--attention", 1, "attention kernels: zayac, cudnn or auto (cuda.attention; default auto)",
         NULL},
        {"--attention-workspace-gib", 1,
         "cuDNN attention backward workspace cap: auto (the default: what one pass needs where "
         "the GPU has room, else 2 GiB) or GiB in 0.0625..64; auto attention's choice and the "
         "chunk size (cuda.attention_workspace_gib)",
         NULL},
        {"--help", 0, "this help", NULL},
        {NULL, 0, NULL, NULL}};
    int done = args_cli("bench train", "(--preset NAME | --config FILE) [options]", opts, argc,
                        argv, NULL, 0, NULL);
    if (done != ARGS_RUN) return done;
    bench_train_opts o;
    bench_train_opts_default(&o);
    if (train_parse(opts, &o) != ZY_OK) return cli_error("bench train");
    long long ranks;
    if (args_int_in(opts, "-n", 1, 1, 4096, &ranks) != ZY_OK) return cli_error("bench train");
    dist_env env;
    if (dist_env_from_environ(&env) != ZY_OK) return cli_error("bench train");
    if (ranks > 1 && env.world == 1)
        return train_relaunch(argc, argv, args_get(opts, "-n"), o.device == ZY_DEV_CPU);
    if (ranks > 1 && env.world != ranks) {
        zy_fail("-n %lld inside a launcher that started %d ranks (leave -n out under a launcher)",
                ranks, env.world);
        return cli_error("bench train");
    }
    o.progress = stdout;
    bench_train_result r;
    int code = 0;
    if (bench_train_run(&o, &r) != ZY_OK) {
        code = cli_error("bench train");
    } else if (r.rank == 0) {
        bench_train_print(stdout, &o, &r);
        const char *json = args_get(opts, "--json");
        if (json && bench_train_write(json, &o, &r) != ZY_OK)
            code = cli_error("bench train");
        else if (json)
            printf("# wrote %s\n", json);
    }
    bench_train_result_free(&r);
    return code;
}
/* ================================================================== end of bench train */

int cmd_bench(int argc, char **argv) {
    static const zy_subcmd subs[] = {
        {"collectives", bench_collectives,
         "NCCL collectives: time, algbw, busbw (nccl-tests' definitions), correctness"},
        {"gemm", bench_gemm, "cuBLASLt GEMM throughput by shape, with sizing observations"},
        {"membw", bench_membw, "device copy/scale/triad and host<->device bandwidth"},
        {"train", bench_train, "whole training step: tokens/s, MFU, memory, per-op time"},
        {NULL, NULL, NULL},
    };
    return args_dispatch("bench", subs, argc, argv);
}
