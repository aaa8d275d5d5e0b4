/* Training metrics sink (see metrics.h). Owns the two files of a run's metrics folder that it
 * writes: metrics.jsonl (one JSON object per step, flushed per step) and a TensorBoard event file,
 * which is TFRecord framing (length, masked CRC-32C of the length, data, masked CRC-32C of the
 * data) around hand-encoded `Event` protocol buffers: Event   { double wall_time = 1; int64 step =
 * 2; string file_version = 3; Summary summary = 5; } Summary { repeated Value value = 1; }   Value
 * { string tag = 1; float simple_value = 2; } Also the console progress line and the loss-curve
 * plot read back from the JSONL. */
#include "train/metrics.h"
#include "base/crc32c.h"

#include "base/err.h"
#include "base/fileio.h"
#include "base/plot.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <pthread.h>
#include <stdio.h>
#include <stdio_ext.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define MAX_TAG 256 /* bytes of a tag, without the NUL */

struct zy_metrics {
    FILE *jsonl, *events;
    char *jsonl_path, *events_path;
    /* the step being gathered */
    int have_step;
    int64_t step;
    int n, cap;
    char **tags;  /* [cap] */
    double *vals; /* [cap] */
    uint8_t *pb;  /* protobuf scratch [pb_cap] */
    size_t pb_len, pb_cap;
    char *failed; /* the first failed write's message: every later call reports it again */
};

/* Records a failed write (errno names why) and returns the runtime error. After one, the sink
 * takes nothing more: a metrics file with a gap or a torn line would look whole. */
static int sink_fail(zy_metrics *m, const char *path, const char *what) {
    zy_fail_runtime("%s: %s: %s", path, what, strerror(errno ? errno : EIO));
    if (!m->failed) m->failed = zy_strdup(zy_errmsg());
    return ZY_ERR;
}

/* The recorded failure again, or ZY_OK. */
static int sink_failed(const zy_metrics *m) {
    return m->failed ? zy_fail_runtime("%s", m->failed) : ZY_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* CRC-32C */

/* TensorBoard frames records with CRC-32C (the shared base/crc32c). */
uint32_t metrics_crc32c(const void *data, size_t n) {
    return zy_crc32c(0, data, n);
}

uint32_t metrics_crc32c_masked(const void *data, size_t n) {
    uint32_t c = metrics_crc32c(data, n);
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

/* ---------------------------------------------------------------------------------------------- */
/* Protocol buffer encoding into m->pb                                                            */

static void pb_byte(zy_metrics *m, uint8_t b) {
    if (m->pb_len == m->pb_cap) {
        m->pb_cap = m->pb_cap ? m->pb_cap * 2 : 256;
        m->pb = zy_realloc(m->pb, m->pb_cap);
    }
    m->pb[m->pb_len++] = b;
}

static void pb_varint(zy_metrics *m, uint64_t v) {
    while (v >= 0x80) {
        pb_byte(m, (uint8_t)(v | 0x80));
        v >>= 7;
    }
    pb_byte(m, (uint8_t)v);
}

static size_t varint_size(uint64_t v) {
    size_t n = 1;
    while (v >= 0x80) v >>= 7, n++;
    return n;
}

/* Field key: field number and wire type (0 varint, 1 fixed64, 2 length-delimited, 5 fixed32). */
static void pb_key(zy_metrics *m, int field, int wire) {
    pb_varint(m, (uint64_t)(field << 3 | wire));
}

static void pb_fixed(zy_metrics *m, uint64_t bits, int bytes) {
    for (int i = 0; i < bytes; i++) pb_byte(m, (uint8_t)(bits >> (8 * i))); /* little-endian */
}

static void pb_double(zy_metrics *m, int field, double v) {
    uint64_t bits;
    memcpy(&bits, &v, 8);
    pb_key(m, field, 1);
    pb_fixed(m, bits, 8);
}

static void pb_float(zy_metrics *m, int field, float v) {
    uint32_t bits;
    memcpy(&bits, &v, 4);
    pb_key(m, field, 5);
    pb_fixed(m, bits, 4);
}

static void pb_bytes(zy_metrics *m, int field, const void *data, size_t n) {
    pb_key(m, field, 2);
    pb_varint(m, n);
    for (size_t i = 0; i < n; i++) pb_byte(m, ((const uint8_t *)data)[i]);
}

static double wall_time(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec * 1e-6;
}

/* Frames m->pb as one TFRecord and appends it to the event file. */
static int write_record(zy_metrics *m) {
    uint8_t head[12];
    uint64_t len = m->pb_len;
    for (int i = 0; i < 8; i++) head[i] = (uint8_t)(len >> (8 * i));
    uint32_t hcrc = metrics_crc32c_masked(head, 8), dcrc = metrics_crc32c_masked(m->pb, m->pb_len);
    for (int i = 0; i < 4; i++) head[8 + i] = (uint8_t)(hcrc >> (8 * i));
    uint8_t tail[4];
    for (int i = 0; i < 4; i++) tail[i] = (uint8_t)(dcrc >> (8 * i));
    errno = 0;
    if (fwrite(head, 1, 12, m->events) != 12 ||
        fwrite(m->pb, 1, m->pb_len, m->events) != m->pb_len || fwrite(tail, 1, 4, m->events) != 4 ||
        fflush(m->events) != 0)
        return sink_fail(m, m->events_path, "write failed");
    return ZY_OK;
}

/* ---------------------------------------------------------------------------------------------- */
/* The sink */

/* Writes s as a JSON string (quotes and escapes). */
static void json_string(FILE *f, const char *s) {
    fputc('"', f);
    for (const unsigned char *p = (const unsigned char *)s; *p; p++) {
        if (*p == '"' || *p == '\\')
            fprintf(f, "\\%c", *p);
        else if (*p < 0x20)
            fprintf(f, "\\u%04x", *p);
        else
            fputc(*p, f);
    }
    fputc('"', f);
}

/* Writes the gathered step as one JSONL line and one event, then starts afresh. */
static int emit_step(zy_metrics *m) {
    if (!m->have_step) return ZY_OK;
    double now = wall_time();
    FILE *f = m->jsonl;
    const off_t line_start = ftello(f); /* a line that fails is cut off again, not left torn */
    errno = 0;
    fprintf(f, "{\"step\":%lld,\"wall_time\":%.3f", (long long)m->step, now);
    for (int i = 0; i < m->n; i++) {
        fputc(',', f);
        json_string(f, m->tags[i]);
        if (isfinite(m->vals[i]))
            fprintf(f, ":%.15g", m->vals[i]);
        else
            fputs(":null", f);
    }
    fputs("}\n", f);
    if (ferror(f) || fflush(f) != 0) {
        int rc = sink_fail(m, m->jsonl_path, "write failed");
        __fpurge(f); /* what stdio still holds would land after the cut */
        if (line_start >= 0 && ftruncate(fileno(f), line_start) != 0) { /* not a file: nothing */
        }
        return rc;
    }

    /* Event { wall_time, step, summary { value { tag, simple_value } ... } } */
    size_t summary_len = 0;
    for (int i = 0; i < m->n; i++) {
        size_t tl = strlen(m->tags[i]), vl = 1 + varint_size(tl) + tl + 5;
        summary_len += 1 + varint_size(vl) + vl;
    }
    m->pb_len = 0;
    pb_double(m, 1, now);
    pb_key(m, 2, 0);
    pb_varint(m, (uint64_t)m->step);
    pb_key(m, 5, 2);
    pb_varint(m, summary_len);
    for (int i = 0; i < m->n; i++) {
        size_t tl = strlen(m->tags[i]), vl = 1 + varint_size(tl) + tl + 5;
        pb_key(m, 1, 2);
        pb_varint(m, vl);
        pb_bytes(m, 1, m->tags[i], tl);
        pb_float(m, 2, (float)m->vals[i]);
    }
    for (int i = 0; i < m->n; i++) free(m->tags[i]);
    m->n = 0;
    m->have_step = 0;
    return write_record(m);
}

int metrics_open(zy_metrics **out, const char *dir) {
    *out = NULL;
    ZY_TRY(zy_mkdirs(dir));
    zy_metrics *m = zy_calloc(1, sizeof *m);
    char path[4096];
    if (zy_path_join(path, sizeof path, dir, "metrics.jsonl") != ZY_OK) goto fail;
    m->jsonl_path = zy_strdup(path);
    m->jsonl = fopen(path, "a");
    if (!m->jsonl) {
        zy_fail_errno(path, "cannot open for appending", errno);
        goto fail;
    }

    /* a fresh event file; O_EXCL so two sinks never share (or truncate) one */
    char host[256] = "localhost";
    if (gethostname(host, sizeof host - 1) != 0) snprintf(host, sizeof host, "localhost");
    static int counter; /* distinguishes sinks opened by one process in one second */
    for (int tries = 0; tries < 1000 && !m->events; tries++) {
        char name[512];
        int k = __atomic_fetch_add(&counter, 1, __ATOMIC_RELAXED);
        snprintf(name, sizeof name, "events.out.tfevents.%lld.%s.%d.%d", (long long)time(NULL),
                 host, (int)getpid(), k);
        if (zy_path_join(path, sizeof path, dir, name) != ZY_OK) goto fail;
        int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
        if (fd < 0 && errno == EEXIST) continue;
        if (fd < 0) {
            zy_fail_errno(path, "cannot create", errno);
            goto fail;
        }
        m->events = fdopen(fd, "wb");
        if (!m->events) {
            close(fd);
            zy_fail_runtime("%s: cannot open: %s", path, strerror(errno));
            goto fail;
        }
        m->events_path = zy_strdup(path);
    }
    if (!m->events) {
        zy_fail_runtime("%s: no free event file name", dir);
        goto fail;
    }
    /* the first record names the format version */
    static const char version[] = "brain.Event:2";
    pb_double(m, 1, wall_time());
    pb_key(m, 2, 0);
    pb_varint(m, 0);
    pb_bytes(m, 3, version, sizeof version - 1);
    if (write_record(m) != ZY_OK) goto fail;
    *out = m;
    return ZY_OK;
fail:
    if (m->events) fclose(m->events);
    if (m->events_path) unlink(m->events_path);
    if (m->jsonl) fclose(m->jsonl);
    free(m->jsonl_path);
    free(m->events_path);
    free(m->pb);
    free(m);
    return ZY_ERR;
}

int metrics_scalar(zy_metrics *m, const char *tag, int64_t step, double value) {
    ZY_TRY(sink_failed(m));
    if (!tag || !*tag || strlen(tag) > MAX_TAG)
        return zy_fail("%s: metric tag must be 1..%d bytes", m->jsonl_path, MAX_TAG);
    if (!strcmp(tag, "step") || !strcmp(tag, "wall_time"))
        return zy_fail("%s: metric tag \"%s\" is reserved", m->jsonl_path, tag);
    if (m->have_step && step != m->step) ZY_TRY(emit_step(m));
    m->have_step = 1;
    m->step = step;
    for (int i = 0; i < m->n; i++)
        if (!strcmp(m->tags[i], tag)) {
            m->vals[i] = value;
            return ZY_OK;
        }
    if (m->n == m->cap) {
        m->cap = m->cap ? m->cap * 2 : 16;
        m->tags = zy_realloc(m->tags, sizeof(char *) * m->cap);
        m->vals = zy_realloc(m->vals, sizeof(double) * m->cap);
    }
    m->tags[m->n] = zy_strdup(tag);
    m->vals[m->n++] = value;
    return ZY_OK;
}

int metrics_flush(zy_metrics *m) {
    ZY_TRY(sink_failed(m));
    ZY_TRY(emit_step(m));
    errno = 0;
    if (fflush(m->jsonl) != 0) return sink_fail(m, m->jsonl_path, "flush failed");
    if (fflush(m->events) != 0) return sink_fail(m, m->events_path, "flush failed");
    return ZY_OK;
}

int metrics_close(zy_metrics *m) {
    if (!m) return ZY_OK;
    int rc = metrics_flush(m);
    /* fsync so a finished run's metrics survive a crash of the machine (a device that cannot
     * sync, a pipe or /dev/null, is not a failure) */
    errno = 0;
    if (rc == ZY_OK && fsync(fileno(m->jsonl)) != 0 && errno != EINVAL && errno != EROFS)
        rc = sink_fail(m, m->jsonl_path, "fsync failed");
    errno = 0;
    if (rc == ZY_OK && fsync(fileno(m->events)) != 0 && errno != EINVAL && errno != EROFS)
        rc = sink_fail(m, m->events_path, "fsync failed");
    errno = 0;
    if (fclose(m->jsonl) != 0 && rc == ZY_OK) rc = sink_fail(m, m->jsonl_path, "close failed");
    errno = 0;
    if (fclose(m->events) != 0 && rc == ZY_OK) rc = sink_fail(m, m->events_path, "close failed");
    free(m->failed);
    for (int i = 0; i < m->n; i++) free(m->tags[i]);
    free(m->tags);
    free(m->vals);
    free(m->pb);
    free(m->jsonl_path);
    free(m->events_path);
    free(m);
    return rc;
}

const char *metrics_jsonl_path(const zy_metrics *m) {
    return m->jsonl_path;
}

const char *metrics_events_path(const zy_metrics *m) {
    return m->events_path;
}

/* ---------------------------------------------------------------------------------------------- */
/* Progress line */

/* "42s", "2m03s", "1h02m03s", "2d03h04m"; "--" when unknown. */
static void fmt_duration(char *buf, size_t n, double s) {
    if (!isfinite(s) || s < 0) {
        snprintf(buf, n, "--");
        return;
    }
    long long t = llround(s);
    if (t < 60)
        snprintf(buf, n, "%llds", t);
    else if (t < 3600)
        snprintf(buf, n, "%lldm%02llds", t / 60, t % 60);
    else if (t < 86400)
        snprintf(buf, n, "%lldh%02lldm%02llds", t / 3600, t / 60 % 60, t % 60);
    else
        snprintf(buf, n, "%lldd%02lldh%02lldm", t / 86400, t / 3600 % 24, t / 60 % 60);
}

/* "812", "41.2k", "1.23M", "2.05G"; "--" when unknown. */
static void fmt_rate(char *buf, size_t n, double r) {
    if (!isfinite(r) || r < 0)
        snprintf(buf, n, "--");
    else if (r < 999.5)
        snprintf(buf, n, "%.0f", r);
    else if (r < 999.5e3)
        snprintf(buf, n, "%.1fk", r / 1e3);
    else if (r < 999.5e6)
        snprintf(buf, n, "%.2fM", r / 1e6);
    else
        snprintf(buf, n, "%.2fG", r / 1e9);
}

int progress_line(char *buf, size_t n, int64_t step, int64_t total_steps, double loss,
                  double tokens_per_s, double elapsed_s) {
    char steps[48], rate[24], el[24], eta[24], lossb[24];
    if (total_steps > 0)
        snprintf(steps, sizeof steps, "%lld/%lld", (long long)step, (long long)total_steps);
    else
        snprintf(steps, sizeof steps, "%lld", (long long)step);
    if (isfinite(loss))
        snprintf(lossb, sizeof lossb, "%.3f", loss);
    else
        snprintf(lossb, sizeof lossb, "%s", isnan(loss) ? "nan" : "inf");
    fmt_rate(rate, sizeof rate, tokens_per_s);
    fmt_duration(el, sizeof el, elapsed_s);
    double left = NAN;
    if (total_steps > 0 && step >= total_steps)
        left = 0;
    else if (total_steps > 0 && step > 0)
        left = elapsed_s * (double)(total_steps - step) / (double)step;
    fmt_duration(eta, sizeof eta, left);
    return snprintf(buf, n, "step %s | loss %s | %s tok/s | %s elapsed | ETA %s", steps, lossb,
                    rate, el, eta);
}

/* ---------------------------------------------------------------------------------------------- */
/* Loss curves */

typedef struct {
    double *x, *y;
    int n, cap;
} points;

/* Appends (step, v); a step at or before the last one starts over from there (a resumed run). */
static void points_add(points *p, double step, double v) {
    while (p->n > 0 && p->x[p->n - 1] >= step) p->n--;
    if (p->n == p->cap) {
        p->cap = p->cap ? p->cap * 2 : 256;
        p->x = zy_realloc(p->x, sizeof(double) * p->cap);
        p->y = zy_realloc(p->y, sizeof(double) * p->cap);
    }
    p->x[p->n] = step;
    p->y[p->n++] = v;
}

/* Adds key's value from a row: numbers as they are, null as a gap; absent adds nothing. */
static void row_take(const cJSON *row, const char *key, double step, points *p) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(row, key);
    if (cJSON_IsNumber(v))
        points_add(p, step, v->valuedouble);
    else if (cJSON_IsNull(v))
        points_add(p, step, NAN);
}

int metrics_plot_loss(const char *jsonl_path, const char *png_path) {
    char *text;
    size_t len;
    ZY_TRY(zy_read_file(jsonl_path, &text, &len));
    points train = {0}, val = {0}, phase = {0};
    int rc = ZY_OK, line_no = 0;
    for (size_t at = 0; at < len && rc == ZY_OK;) {
        char *nl = memchr(text + at, '\n', len - at);
        size_t end = nl ? (size_t)(nl - text) : len;
        line_no++;
        const char *line = text + at;
        size_t ll = end - at;
        at = end + 1;
        size_t k = 0;
        while (k < ll && (line[k] == ' ' || line[k] == '\t' || line[k] == '\r')) k++;
        if (k == ll) continue; /* blank line */
        const char *parse_end = NULL;
        cJSON *row = cJSON_ParseWithLengthOpts(line, ll, &parse_end, 0);
        int trailing = 0;
        if (row && parse_end)
            for (const char *q = parse_end; q < line + ll; q++) trailing |= !strchr(" \t\r", *q);
        if (!row || trailing || !cJSON_IsObject(row)) {
            cJSON_Delete(row);
            if (!nl) break; /* an unfinished last line: a writer stopped mid-line; skip it */
            rc = zy_fail("%s:%d: expected one JSON object per line, found \"%.40s\"", jsonl_path,
                         line_no, line);
            break;
        }
        const cJSON *step = cJSON_GetObjectItemCaseSensitive(row, "step");
        if (!cJSON_IsNumber(step)) {
            cJSON_Delete(row);
            rc = zy_fail("%s:%d: the object has no numeric \"step\"", jsonl_path, line_no);
            break;
        }
        row_take(row, "loss", step->valuedouble, &train);
        row_take(row, "val_loss", step->valuedouble, &val);
        row_take(row, "phase", step->valuedouble, &phase);
        cJSON_Delete(row);
    }
    free(text);
    if (rc == ZY_OK && train.n == 0 && val.n == 0)
        rc = zy_fail("%s: no \"loss\" or \"val_loss\" values to plot", jsonl_path);
    if (rc == ZY_OK) {
        zy_series s[2];
        int ns = 0;
        if (train.n) s[ns++] = (zy_series){"train loss", train.x, train.y, train.n};
        if (val.n) s[ns++] = (zy_series){"val loss", val.x, val.y, val.n};
        /* a phase's start: between its first step and the step before it */
        double *marks = zy_malloc(sizeof(double) * (size_t)(phase.n + 1));
        int nm = 0;
        for (int i = 1; i < phase.n; i++)
            if (phase.y[i] != phase.y[i - 1]) marks[nm++] = (phase.x[i - 1] + phase.x[i]) / 2;
        zy_plot_opts o = {.title = "Loss", .xlabel = "step", .ylabel = "loss"};
        rc = plot_lines_marked_png(png_path, &o, s, ns, marks, nm);
        free(marks);
    }
    free(phase.x);
    free(phase.y);
    free(train.x);
    free(train.y);
    free(val.x);
    free(val.y);
    return rc;
}
