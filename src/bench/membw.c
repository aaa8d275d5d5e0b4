/* Memory bandwidth benchmark: definitions, table, JSON, plots (see membw.h). */
#include "bench/membw.h"
#include "base/err.h"
#include "base/plot.h"

#include <cjson/cJSON.h>
#include <stdlib.h>
#include <string.h>

static const char *const names[MEMBW_NKINDS] = {"copy",       "scale",        "triad",
                                                "memcpy_d2d", "h2d_pageable", "d2h_pageable",
                                                "h2d_pinned", "d2h_pinned"};

const char *bench_membw_name(bench_membw_kind k) {
    return (unsigned)k < MEMBW_NKINDS ? names[k] : "?";
}

int bench_membw_is_host(bench_membw_kind k) {
    return k >= MEMBW_H2D_PAGEABLE;
}

double bench_membw_moved(bench_membw_kind k, size_t bytes) {
    switch (k) {
    case MEMBW_COPY:
    case MEMBW_SCALE:
    case MEMBW_MEMCPY:
        return 2.0 * (double)bytes; /* read a, write b */
    case MEMBW_TRIAD:
        return 3.0 * (double)bytes; /* read b and c, write a */
    default:
        return (double)bytes; /* over the link once */
    }
}

void bench_membw_opts_default(bench_membw_opts *o) {
    memset(o, 0, sizeof *o);
    o->min_bytes = 256u << 10;
    o->max_bytes = (size_t)4 << 30;
    o->host_min_bytes = 64u << 10;
    o->host_max_bytes = (size_t)1 << 30;
    o->target_ms = 20;
    o->out_dir = "zayac-bench";
}

void bench_membw_result_init(bench_membw_result *r) {
    memset(r, 0, sizeof *r);
}

void bench_membw_result_free(bench_membw_result *r) {
    free(r->rows);
    memset(r, 0, sizeof *r);
}

void bench_membw_result_add(bench_membw_result *r, const bench_membw_row *row) {
    if (r->nrows == r->cap) {
        r->cap = r->cap ? 2 * r->cap : 64;
        r->rows = zy_realloc(r->rows, sizeof(bench_membw_row) * (size_t)r->cap);
    }
    r->rows[r->nrows++] = *row;
}

void bench_membw_print(FILE *f, const bench_membw_result *r) {
    fprintf(f, "%-13s %14s %12s %10s %8s %8s\n", "kind", "bytes/array", "time(us)", "GB/s", "wrong",
            "variant");
    for (int i = 0; i < r->nrows; i++) {
        const bench_membw_row *w = &r->rows[i];
        char sz[32];
        bench_format_bytes(w->bytes, sz, sizeof sz);
        fprintf(f, "%-13s %14s %12.2f %10.1f ", bench_membw_name(w->kind), sz, w->time_us, w->gbps);
        if (w->wrong < 0)
            fprintf(f, "%8s\n", "-");
        else
            fprintf(f, "%8lld\n", (long long)w->wrong);
    }
    /* The best of each kind: the number to quote. */
    fprintf(f, "# best:");
    for (int k = 0; k < MEMBW_NKINDS; k++) {
        double best = 0;
        for (int i = 0; i < r->nrows; i++)
            if ((int)r->rows[i].kind == k && r->rows[i].gbps > best) best = r->rows[i].gbps;
        if (best > 0) fprintf(f, " %s %.0f GB/s;", bench_membw_name((bench_membw_kind)k), best);
    }
    fputc('\n', f);
    fflush(f);
}

cJSON *bench_membw_to_json(const bench_membw_result *r) {
    cJSON *root = cJSON_CreateObject();
    cJSON_AddStringToObject(root, "bench", "membw");
    cJSON_AddNumberToObject(root, "version", 1);
    cJSON_AddItemToObject(root, "machine", bench_machine_to_json(&r->machine));
    cJSON_AddStringToObject(root, "units",
                            "bytes per array; GB/s = (bytes read + written) / 1e9 "
                            "/ s; host copies count the bytes once");
    cJSON *rows = cJSON_AddArrayToObject(root, "rows");
    for (int i = 0; i < r->nrows; i++) {
        const bench_membw_row *w = &r->rows[i];
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "kind", bench_membw_name(w->kind));
        cJSON_AddNumberToObject(o, "bytes", (double)w->bytes);
        cJSON_AddNumberToObject(o, "moved_bytes", bench_membw_moved(w->kind, w->bytes));
        cJSON_AddNumberToObject(o, "time_us", w->time_us);
        cJSON_AddNumberToObject(o, "GBps", w->gbps);
        cJSON_AddNumberToObject(o, "wrong", (double)w->wrong);
        cJSON_AddNumberToObject(o, "variant", w->variant);
        cJSON_AddItemToArray(rows, o);
    }
    return root;
}

int bench_membw_write(const char *dir, const bench_membw_result *r) {
    char path[4096];
    ZY_TRY(bench_out_path(path, sizeof path, dir, "membw.json"));
    cJSON *root = bench_membw_to_json(r);
    int rc = bench_write_json(path, root);
    cJSON_Delete(root);
    return rc;
}

int bench_membw_plot(const char *dir, const bench_membw_result *r) {
    zy_series s[MEMBW_NKINDS];
    double *xs = zy_malloc(sizeof(double) * (size_t)(r->nrows + 1));
    double *ys = zy_malloc(sizeof(double) * (size_t)(r->nrows + 1));
    int rc = ZY_OK;
    for (int host = 0; host < 2 && rc == ZY_OK; host++) {
        int ns = 0, used = 0;
        for (int k = 0; k < MEMBW_NKINDS; k++) {
            if (bench_membw_is_host((bench_membw_kind)k) != host) continue;
            int n = 0;
            for (int i = 0; i < r->nrows; i++) {
                if ((int)r->rows[i].kind != k) continue;
                xs[used + n] = (double)r->rows[i].bytes;
                ys[used + n] = r->rows[i].gbps;
                n++;
            }
            if (!n) continue;
            s[ns].label = bench_membw_name((bench_membw_kind)k);
            s[ns].x = xs + used;
            s[ns].y = ys + used;
            s[ns].n = n;
            used += n;
            ns++;
        }
        if (!ns) continue;
        char path[4096];
        rc = bench_out_path(path, sizeof path, dir, host ? "membw_host.png" : "membw_device.png");
        zy_plot_opts po = {host ? "host <-> device copies" : "device memory bandwidth",
                           "bytes per array",
                           "GB/s (read + written)",
                           2,
                           0,
                           0,
                           0};
        if (rc == ZY_OK) rc = plot_lines_png(path, &po, s, ns);
    }
    free(xs);
    free(ys);
    return rc;
}
