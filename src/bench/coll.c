/* Collective benchmark: definitions, table, result files and plots (see coll.h). */
#include "bench/coll.h"
#include "base/err.h"
#include "base/fileio.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

static const char *const coll_names[COLL_NKINDS] = {"all_reduce", "reduce_scatter", "all_gather",
                                                    "broadcast", "alltoall"};

const char *bench_coll_name(bench_coll_kind k) {
    return (unsigned)k < COLL_NKINDS ? coll_names[k] : "?";
}

int bench_coll_parse(const char *s, bench_coll_kind *k) {
    /* Compare with '_' and '-' removed, so all_reduce, allreduce and all-reduce all match. */
    char a[32];
    size_t n = 0;
    for (const char *p = s; *p && n + 1 < sizeof a; p++)
        if (*p != '_' && *p != '-') a[n++] = *p;
    a[n] = 0;
    for (int i = 0; i < COLL_NKINDS; i++) {
        char b[32];
        size_t m = 0;
        for (const char *p = coll_names[i]; *p; p++)
            if (*p != '_') b[m++] = *p;
        b[m] = 0;
        if (!strcmp(a, b)) {
            *k = (bench_coll_kind)i;
            return ZY_OK;
        }
    }
    return zy_fail("unknown collective '%s' (expected all_reduce, reduce_scatter, all_gather, "
                   "broadcast or alltoall)",
                   s);
}

int bench_coll_reduces(bench_coll_kind k) {
    return k == COLL_ALL_REDUCE || k == COLL_REDUCE_SCATTER;
}

double bench_coll_bus_factor(bench_coll_kind k, int n) {
    switch (k) {
    case COLL_ALL_REDUCE:
        return 2.0 * (n - 1) / n;
    case COLL_BROADCAST:
        return 1.0;
    default:
        return (double)(n - 1) / n;
    }
}

void bench_coll_counts_for(bench_coll_kind k, size_t bytes, size_t elt, int n,
                           bench_coll_counts *c) {
    memset(c, 0, sizeof *c);
    size_t count = bytes / elt;
    size_t align = 16 / elt; /* nccl-tests keeps each rank's share a multiple of 16 bytes */
    size_t base = (count / (size_t)n) & ~(align - 1);
    switch (k) {
    case COLL_ALL_REDUCE:
    case COLL_BROADCAST:
        c->count = c->send_count = c->recv_count = count;
        break;
    case COLL_ALL_GATHER:
        c->count = c->send_count = base;
        c->recv_count = base * (size_t)n;
        c->send_inplace_off = base;
        break;
    case COLL_REDUCE_SCATTER:
        c->count = c->recv_count = base;
        c->send_count = base * (size_t)n;
        c->recv_inplace_off = base;
        break;
    case COLL_ALL_TO_ALL:
        c->count = base;
        c->send_count = c->recv_count = base * (size_t)n;
        break;
    default:
        break;
    }
    size_t m = c->send_count > c->recv_count ? c->send_count : c->recv_count;
    c->size_bytes = m * elt;
}

void bench_coll_bw(bench_coll_kind k, size_t count, size_t elt, double sec, int n, double *algbw,
                   double *busbw) {
    /* The bytes nccl-tests divides by the time: the whole message (count * elt for all-reduce
     * and broadcast, count * elt * n for the collectives whose count is per rank). */
    double bytes = (double)count * (double)elt;
    if (k == COLL_ALL_GATHER || k == COLL_REDUCE_SCATTER || k == COLL_ALL_TO_ALL) bytes *= n;
    *algbw = sec > 0 ? bytes / 1.0e9 / sec : 0;
    *busbw = *algbw * bench_coll_bus_factor(k, n);
}

void bench_coll_opts_default(bench_coll_opts *o) {
    memset(o, 0, sizeof *o);
    o->min_bytes = 8;
    o->max_bytes = 128u << 20;
    o->factor = 2;
    o->warmup = 5;
    o->iters = 20;
    for (int i = 0; i < COLL_NKINDS; i++) o->colls[i] = (bench_coll_kind)i;
    o->ncolls = COLL_NKINDS;
    o->dtypes[0] = BENCH_BF16;
    o->ndtypes = 1;
    o->placement = 2;
    o->check = 1;
    o->root = 0;
    o->timeout_s = 300;
    o->out_dir = "zayac-bench";
}

void bench_coll_result_init(bench_coll_result *r) {
    memset(r, 0, sizeof *r);
}

void bench_coll_result_free(bench_coll_result *r) {
    free(r->rows);
    memset(r, 0, sizeof *r);
}

void bench_coll_result_add(bench_coll_result *r, const bench_coll_row *row) {
    if (r->nrows == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 64;
        r->rows = zy_realloc(r->rows, sizeof(bench_coll_row) * (size_t)r->cap);
    }
    r->rows[r->nrows++] = *row;
}

static const char *nccl_type_name(bench_dtype t) {
    return t == BENCH_BF16 ? "bfloat16" : "float";
}

void bench_coll_print_header(FILE *f, bench_coll_kind k, bench_dtype t, int nranks) {
    fprintf(f, "#\n# %s, %s, %d rank(s)\n", bench_coll_name(k), bench_dtype_name(t), nranks);
    fprintf(f, "#%61s%36s\n", "out-of-place", "in-place");
    fprintf(f, "#%12s %13s %9s %6s %5s %9s %7s %7s %6s %9s %7s %7s %6s\n", "size", "count", "type",
            "redop", "root", "time", "algbw", "busbw", "#wrong", "time", "algbw", "busbw",
            "#wrong");
    fprintf(f, "#%12s %13s %9s %6s %5s %9s %7s %7s %6s %9s %7s %7s %6s\n", "(B)", "(elements)", "",
            "", "", "(us)", "(GB/s)", "(GB/s)", "", "(us)", "(GB/s)", "(GB/s)", "");
}

static void print_half(FILE *f, const bench_coll_row *r) {
    if (!r) {
        fprintf(f, " %9s %7s %7s %6s", "-", "-", "-", "-");
        return;
    }
    fprintf(f, " %9.2f %7.2f %7.2f", r->time_us, r->algbw, r->busbw);
    if (r->wrong < 0)
        fprintf(f, " %6s", "N/A");
    else
        fprintf(f, " %6lld", (long long)r->wrong);
}

void bench_coll_print_line(FILE *f, const bench_coll_row *out, const bench_coll_row *in) {
    const bench_coll_row *a = out ? out : in;
    if (!a) return;
    fprintf(f, " %12zu %13zu %9s %6s %5d", a->size_bytes, a->count, nccl_type_name(a->dtype),
            bench_coll_reduces(a->coll) ? "sum" : "none", a->coll == COLL_BROADCAST ? 0 : -1);
    print_half(f, out);
    print_half(f, in);
    fputc('\n', f);
    fflush(f);
}

void bench_coll_print_summary(FILE *f, const bench_coll_result *r) {
    fprintf(f, "#\n# peak bus bandwidth, %d rank(s) on %d node(s):\n", r->nranks, r->nnodes);
    for (int k = 0; k < COLL_NKINDS; k++)
        for (int t = 0; t < 2; t++) {
            double best = -1;
            size_t at = 0;
            long long wrong = 0;
            int checked = 0, any = 0;
            for (int i = 0; i < r->nrows; i++) {
                const bench_coll_row *w = &r->rows[i];
                if ((int)w->coll != k || (int)w->dtype != t) continue;
                any = 1;
                if (w->busbw > best) best = w->busbw, at = w->size_bytes;
                if (w->wrong >= 0) wrong += w->wrong, checked = 1;
            }
            if (!any) continue;
            char sz[32];
            bench_format_bytes(at, sz, sizeof sz);
            fprintf(f, "#   %-15s %-5s %8.2f GB/s at %-6s wrong elements: ",
                    bench_coll_name((bench_coll_kind)k), bench_dtype_name((bench_dtype)t), best,
                    sz);
            if (checked)
                fprintf(f, "%lld\n", wrong);
            else
                fprintf(f, "not checked\n");
        }
}

cJSON *bench_coll_to_json(const bench_coll_result *r) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "bench", "collectives");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddItemToObject(root, "machine", bench_machine_to_json(&r->machine));
    cJSON_AddNumberToObject(root, "nranks", r->nranks);
    cJSON_AddNumberToObject(root, "nnodes", r->nnodes);
    cJSON_AddNumberToObject(root, "warmup", r->warmup);
    cJSON_AddNumberToObject(root, "iters", r->iters);
    cJSON_AddStringToObject(root, "units",
                            "time_us: microseconds per operation (mean over ranks);"
                            " bandwidths in GB/s with GB = 1e9 (nccl-tests)");
    cJSON *rows = cJSON_AddArrayToObject(root, "rows");
    for (int i = 0; i < r->nrows; i++) {
        const bench_coll_row *w = &r->rows[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "collective", bench_coll_name(w->coll));
        cJSON_AddStringToObject(o, "dtype", bench_dtype_name(w->dtype));
        cJSON_AddStringToObject(o, "placement", w->inplace ? "in-place" : "out-of-place");
        cJSON_AddNumberToObject(o, "size_bytes", (double)w->size_bytes);
        cJSON_AddNumberToObject(o, "count", (double)w->count);
        cJSON_AddNumberToObject(o, "time_us", w->time_us);
        cJSON_AddNumberToObject(o, "algbw_GBps", w->algbw);
        cJSON_AddNumberToObject(o, "busbw_GBps", w->busbw);
        cJSON_AddNumberToObject(o, "wrong", (double)w->wrong);
        cJSON_AddItemToArray(rows, o);
    }
    return root;
}

static int need_num(const cJSON *o, const char *key, const char *path, int idx, double min,
                    double *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsNumber(v) || !isfinite(v->valuedouble) || v->valuedouble < min) {
        if (idx >= 0)
            return zy_fail("%s: rows[%d].%s: expected a number >= %g", path, idx, key, min);
        return zy_fail("%s: %s: expected a number >= %g", path, key, min);
    }
    *out = v->valuedouble;
    return ZY_OK;
}

static int need_str(const cJSON *o, const char *key, const char *path, int idx, const char **out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    if (!cJSON_IsString(v)) return zy_fail("%s: rows[%d].%s: expected a string", path, idx, key);
    *out = v->valuestring;
    return ZY_OK;
}

static int parse_rows(const cJSON *root, const char *path, bench_coll_result *r) {
    const cJSON *kind = cJSON_GetObjectItemCaseSensitive(root, "bench");
    if (!cJSON_IsString(kind) || strcmp(kind->valuestring, "collectives") != 0)
        return zy_fail("%s: not a collectives result file (\"bench\" is not \"collectives\")",
                       path);
    double x = 0;
    ZY_TRY(need_num(root, "nranks", path, -1, 1, &x));
    r->nranks = (int)x;
    r->nnodes = 1;
    if (cJSON_GetObjectItemCaseSensitive(root, "nnodes")) {
        ZY_TRY(need_num(root, "nnodes", path, -1, 1, &x));
        r->nnodes = (int)x;
    }
    if (cJSON_GetObjectItemCaseSensitive(root, "iters")) {
        ZY_TRY(need_num(root, "iters", path, -1, 0, &x));
        r->iters = (int)x;
    }
    if (cJSON_GetObjectItemCaseSensitive(root, "warmup")) {
        ZY_TRY(need_num(root, "warmup", path, -1, 0, &x));
        r->warmup = (int)x;
    }
    bench_machine_from_json(cJSON_GetObjectItemCaseSensitive(root, "machine"), &r->machine);
    const cJSON *rows = cJSON_GetObjectItemCaseSensitive(root, "rows");
    if (!cJSON_IsArray(rows)) return zy_fail("%s: \"rows\" is missing or not an array", path);
    int i = 0;
    const cJSON *o;
    cJSON_ArrayForEach(o, rows) {
        bench_coll_row w;
        memset(&w, 0, sizeof w);
        const char *s = NULL;
        if (!cJSON_IsObject(o)) return zy_fail("%s: rows[%d] is not an object", path, i);
        ZY_TRY(need_str(o, "collective", path, i, &s));
        if (bench_coll_parse(s, &w.coll) != ZY_OK) return zy_fail_ctx("%s: rows[%d]", path, i);
        ZY_TRY(need_str(o, "dtype", path, i, &s));
        if (bench_dtype_parse(s, &w.dtype) != ZY_OK || w.dtype == BENCH_TF32)
            return zy_fail("%s: rows[%d].dtype: '%s' is not bf16 or fp32", path, i, s);
        ZY_TRY(need_str(o, "placement", path, i, &s));
        if (!strcmp(s, "in-place"))
            w.inplace = 1;
        else if (strcmp(s, "out-of-place") != 0)
            return zy_fail("%s: rows[%d].placement: '%s' is not in-place or out-of-place", path, i,
                           s);
        ZY_TRY(need_num(o, "size_bytes", path, i, 0, &x));
        w.size_bytes = (size_t)x;
        ZY_TRY(need_num(o, "count", path, i, 0, &x));
        w.count = (size_t)x;
        ZY_TRY(need_num(o, "time_us", path, i, 0, &w.time_us));
        ZY_TRY(need_num(o, "algbw_GBps", path, i, 0, &w.algbw));
        ZY_TRY(need_num(o, "busbw_GBps", path, i, 0, &w.busbw));
        ZY_TRY(need_num(o, "wrong", path, i, -1, &x));
        w.wrong = (int64_t)x;
        bench_coll_result_add(r, &w);
        i++;
    }
    return ZY_OK;
}

int bench_coll_read(const char *path, bench_coll_result *r) {
    bench_coll_result_init(r);
    cJSON *root;
    ZY_TRY(bench_read_json(path, &root));
    int rc = parse_rows(root, path, r);
    cJSON_Delete(root);
    if (rc != ZY_OK) bench_coll_result_free(r);
    return rc;
}

int bench_coll_write_csv(const char *path, const bench_coll_result *r) {
    size_t cap = 256 + (size_t)r->nrows * 160, len = 0;
    char *buf = zy_malloc(cap);
    len += (size_t)snprintf(buf + len, cap - len,
                            "collective,dtype,nranks,nnodes,placement,size_bytes,count,time_us,"
                            "algbw_GBps,busbw_GBps,wrong\n");
    for (int i = 0; i < r->nrows; i++) {
        const bench_coll_row *w = &r->rows[i];
        len +=
            (size_t)snprintf(buf + len, cap - len, "%s,%s,%d,%d,%s,%zu,%zu,%.3f,%.4f,%.4f,%lld\n",
                             bench_coll_name(w->coll), bench_dtype_name(w->dtype), r->nranks,
                             r->nnodes, w->inplace ? "in-place" : "out-of-place", w->size_bytes,
                             w->count, w->time_us, w->algbw, w->busbw, (long long)w->wrong);
    }
    int rc = zy_write_file_atomic(path, buf, len);
    free(buf);
    return rc;
}

int bench_coll_write(const char *dir, const bench_coll_result *r) {
    char path[4096], name[64];
    snprintf(name, sizeof name, "collectives_n%d.json", r->nranks);
    ZY_TRY(bench_out_path(path, sizeof path, dir, name));
    cJSON *root = bench_coll_to_json(r);
    int rc = bench_write_json(path, root);
    cJSON_Delete(root);
    ZY_TRY(rc);
    snprintf(name, sizeof name, "collectives_n%d.csv", r->nranks);
    ZY_TRY(zy_path_join(path, sizeof path, dir, name));
    return bench_coll_write_csv(path, r);
}

int bench_coll_series(const bench_coll_result *res, int nres, bench_coll_kind k, bench_dtype t,
                      int inplace, zy_series *out, char (*labels)[64]) {
    int ns = 0;
    for (int j = 0; j < nres; j++) {
        const bench_coll_result *r = &res[j];
        int n = 0;
        for (int i = 0; i < r->nrows; i++) {
            const bench_coll_row *w = &r->rows[i];
            if (w->coll == k && w->dtype == t && w->inplace == inplace && w->size_bytes > 0) n++;
        }
        if (n == 0) continue;
        double *x = zy_malloc(sizeof(double) * (size_t)n),
               *y = zy_malloc(sizeof(double) * (size_t)n);
        int m = 0;
        for (int i = 0; i < r->nrows; i++) {
            const bench_coll_row *w = &r->rows[i];
            if (w->coll == k && w->dtype == t && w->inplace == inplace && w->size_bytes > 0) {
                x[m] = (double)w->size_bytes;
                y[m] = w->busbw;
                m++;
            }
        }
        if (r->nnodes > 1)
            snprintf(labels[ns], 64, "%d GPUs, %d nodes", r->nranks, r->nnodes);
        else
            snprintf(labels[ns], 64, "%d GPU%s", r->nranks, r->nranks == 1 ? "" : "s");
        out[ns].label = labels[ns];
        out[ns].x = x;
        out[ns].y = y;
        out[ns].n = m;
        ns++;
    }
    return ns;
}

void bench_coll_series_free(zy_series *s, int n) {
    for (int i = 0; i < n; i++) {
        free((void *)s[i].x);
        free((void *)s[i].y);
    }
}

int bench_coll_plot(const char *dir, const bench_coll_result *res, int nres) {
    zy_series *s = zy_calloc((size_t)nres, sizeof(zy_series));
    char(*labels)[64] = zy_calloc((size_t)nres, 64);
    int rc = ZY_OK;
    for (int k = 0; k < COLL_NKINDS && rc == ZY_OK; k++)
        for (int t = 0; t < 2 && rc == ZY_OK; t++) {
            int ns = bench_coll_series(res, nres, (bench_coll_kind)k, (bench_dtype)t, 0, s, labels);
            if (ns == 0) continue;
            char name[96], path[4096], title[128];
            snprintf(name, sizeof name, "busbw_%s_%s.png", bench_coll_name((bench_coll_kind)k),
                     bench_dtype_name((bench_dtype)t));
            rc = bench_out_path(path, sizeof path, dir, name);
            snprintf(title, sizeof title, "%s %s: bus bandwidth (out-of-place)",
                     bench_coll_name((bench_coll_kind)k), bench_dtype_name((bench_dtype)t));
            zy_plot_opts po = {title, "message size (bytes)", "bus bandwidth (GB/s)", 2, 0, 0, 0};
            if (rc == ZY_OK) rc = plot_lines_png(path, &po, s, ns);
            bench_coll_series_free(s, ns);
        }
    free(s);
    free(labels);
    return rc;
}
