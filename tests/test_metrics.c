/* Tests of src/train/metrics.c: CRC-32C against its standard check value, TensorBoard event files
 * read back by an independent TFRecord/protobuf reader written here, JSONL rows parsed by cJSON,
 * the progress line against hand-worked strings, and the loss plot's handling of its input. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "train/metrics.h"

#include <cjson/cJSON.h>
#include <dirent.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <unistd.h>

/* ---- independent reference: bitwise CRC-32C and a minimal event-file reader ----------------- */

static uint32_t ref_crc32c(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0x82F63B78u & (0u - (c & 1u)));
    }
    return ~c;
}

/* TFRecord's mask: rotate right by 15 bits, add a constant. */
static uint32_t ref_mask(uint32_t c) {
    return ((c >> 15) | (c << 17)) + 0xa282ead8u;
}

static uint64_t le(const uint8_t *p, int n) {
    uint64_t v = 0;
    for (int i = n - 1; i >= 0; i--) v = v << 8 | p[i];
    return v;
}

static uint64_t read_varint(const uint8_t *p, size_t n, size_t *at) {
    uint64_t v = 0;
    for (int shift = 0; shift < 64; shift += 7) {
        assert_true(*at < n);
        uint8_t b = p[(*at)++];
        v |= (uint64_t)(b & 0x7F) << shift;
        if (!(b & 0x80)) return v;
    }
    fail_msg("varint longer than 10 bytes");
    return 0;
}

#define MAX_VALUES 16

typedef struct {
    double wall_time;
    int64_t step;
    char version[32]; /* file_version, "" when absent */
    int has_summary;
    int nv;
    char tags[MAX_VALUES][64];
    float values[MAX_VALUES];
} event;

static void decode_value(const uint8_t *p, size_t n, event *e) {
    assert_true(e->nv < MAX_VALUES);
    size_t at = 0;
    int got_tag = 0, got_val = 0;
    while (at < n) {
        uint64_t key = read_varint(p, n, &at);
        if (key == (1 << 3 | 2)) {
            uint64_t l = read_varint(p, n, &at);
            assert_true(at + l <= n && l < 64);
            memcpy(e->tags[e->nv], p + at, l);
            e->tags[e->nv][l] = 0;
            at += l;
            got_tag = 1;
        } else if (key == (2 << 3 | 5)) {
            assert_true(at + 4 <= n);
            uint32_t bits = (uint32_t)le(p + at, 4);
            memcpy(&e->values[e->nv], &bits, 4);
            at += 4;
            got_val = 1;
        } else {
            fail_msg("unexpected Summary.Value key %llu", (unsigned long long)key);
        }
    }
    assert_int_equal(at, n);
    assert_true(got_tag && got_val);
    e->nv++;
}

static void decode_event(const uint8_t *p, size_t n, event *e) {
    memset(e, 0, sizeof *e);
    size_t at = 0;
    while (at < n) {
        uint64_t key = read_varint(p, n, &at);
        if (key == (1 << 3 | 1)) {
            assert_true(at + 8 <= n);
            uint64_t bits = le(p + at, 8);
            memcpy(&e->wall_time, &bits, 8);
            at += 8;
        } else if (key == (2 << 3 | 0)) {
            e->step = (int64_t)read_varint(p, n, &at);
        } else if (key == (3 << 3 | 2)) {
            uint64_t l = read_varint(p, n, &at);
            assert_true(at + l <= n && l < sizeof e->version);
            memcpy(e->version, p + at, l);
            at += l;
        } else if (key == (5 << 3 | 2)) {
            uint64_t l = read_varint(p, n, &at);
            assert_true(at + l <= n);
            size_t end = at + l;
            e->has_summary = 1;
            while (at < end) {
                assert_int_equal(read_varint(p, end, &at), 1 << 3 | 2);
                uint64_t vl = read_varint(p, end, &at);
                assert_true(at + vl <= end);
                decode_value(p + at, vl, e);
                at += vl;
            }
        } else {
            fail_msg("unexpected Event key %llu", (unsigned long long)key);
        }
    }
    assert_int_equal(at, n);
}

/* Reads every record of an event file, checking the framing and both CRCs of each. */
static int read_events(const char *path, event *ev, int max) {
    char *data;
    size_t len;
    assert_int_equal(zy_read_file(path, &data, &len), ZY_OK);
    const uint8_t *p = (const uint8_t *)data;
    size_t at = 0;
    int n = 0;
    while (at < len) {
        assert_true(at + 12 <= len);
        uint64_t l = le(p + at, 8);
        assert_int_equal((uint32_t)le(p + at + 8, 4), ref_mask(ref_crc32c(p + at, 8)));
        assert_true(at + 12 + l + 4 <= len);
        assert_int_equal((uint32_t)le(p + at + 12 + l, 4), ref_mask(ref_crc32c(p + at + 12, l)));
        assert_true(n < max);
        decode_event(p + at + 12, l, &ev[n++]);
        at += 12 + l + 4;
    }
    free(data);
    return n;
}

static char tmpdir[64];

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/zy_metrics_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(tmpdir);
}

static double now_s(void) {
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return tv.tv_sec + tv.tv_usec * 1e-6;
}

/* ---- tests --------------------------------------------------------------------------------- */

static void test_crc32c(void **state) {
    (void)state;
    assert_int_equal(metrics_crc32c("123456789", 9), 0xE3069283u); /* the standard check value */
    assert_int_equal(metrics_crc32c("", 0), 0);
    uint8_t buf[300];
    for (int i = 0; i < 300; i++) buf[i] = (uint8_t)(i * 37 + 11);
    for (size_t n = 0; n < sizeof buf; n += 7) {
        assert_int_equal(metrics_crc32c(buf, n), ref_crc32c(buf, n));
        assert_int_equal(metrics_crc32c_masked(buf, n), ref_mask(ref_crc32c(buf, n)));
    }
    /* the mask by hand on the check value: rotr(0xE3069283, 15) = 0x2507C60D, + 0xa282ead8 */
    assert_int_equal(metrics_crc32c_masked("123456789", 9), 0x2507C60Du + 0xa282ead8u);
}

static void test_events_and_jsonl_roundtrip(void **state) {
    (void)state;
    char dir[128];
    snprintf(dir, sizeof dir, "%s/run1/metrics", tmpdir);
    double t0 = now_s();
    zy_metrics *m;
    assert_int_equal(metrics_open(&m, dir), ZY_OK);
    char events_path[4096], jsonl_path[4096];
    snprintf(events_path, sizeof events_path, "%s", metrics_events_path(m));
    snprintf(jsonl_path, sizeof jsonl_path, "%s", metrics_jsonl_path(m));
    assert_non_null(strstr(events_path, "/events.out.tfevents."));

    const char *tags[4] = {"loss", "grad_norm", "lr", "moe/layer3/expert_load_max"};
    for (int s = 1; s <= 3; s++)
        for (int k = 0; k < 4; k++)
            assert_int_equal(metrics_scalar(m, tags[k], s * 100, s * 1.5 + k * 0.125 + 1e-7),
                             ZY_OK);
    assert_int_equal(metrics_scalar(m, "loss", 300, 2.75), ZY_OK); /* same step: last value wins */
    assert_int_equal(metrics_scalar(m, "weird \"tag\"\\", 300, NAN), ZY_OK);
    assert_int_equal(metrics_scalar(m, "big", 1LL << 40, 123456789.25), ZY_OK);
    assert_int_equal(metrics_close(m), ZY_OK);
    double t1 = now_s();

    event ev[8];
    int n = read_events(events_path, ev, 8);
    assert_int_equal(n, 5); /* version + steps 100, 200, 300, 2^40 */
    assert_string_equal(ev[0].version, "brain.Event:2");
    assert_false(ev[0].has_summary);
    for (int i = 0; i < n; i++) assert_true(ev[i].wall_time >= t0 - 1 && ev[i].wall_time <= t1 + 1);
    for (int s = 1; s <= 3; s++) {
        event *e = &ev[s];
        assert_int_equal(e->step, s * 100);
        assert_true(e->has_summary);
        assert_int_equal(e->nv, s == 3 ? 5 : 4);
        for (int k = 0; k < 4; k++) {
            assert_string_equal(e->tags[k], tags[k]);
            double want = (s == 3 && k == 0) ? 2.75 : s * 1.5 + k * 0.125 + 1e-7;
            assert_true(e->values[k] == (float)want);
        }
    }
    assert_string_equal(ev[3].tags[4], "weird \"tag\"\\");
    assert_true(isnan(ev[3].values[4]));
    assert_int_equal(ev[4].step, 1LL << 40);
    assert_true(ev[4].values[0] == (float)123456789.25);

    /* JSONL: one object per step, doubles kept to 15 digits, NaN as null */
    char *text;
    size_t len;
    assert_int_equal(zy_read_file(jsonl_path, &text, &len), ZY_OK);
    char *save, *line = strtok_r(text, "\n", &save);
    int rows = 0;
    for (; line; line = strtok_r(NULL, "\n", &save), rows++) {
        cJSON *o = cJSON_Parse(line);
        assert_non_null(o);
        int64_t step = (int64_t)cJSON_GetObjectItem(o, "step")->valuedouble;
        double wt = cJSON_GetObjectItem(o, "wall_time")->valuedouble;
        assert_true(wt >= t0 - 1 && wt <= t1 + 1);
        if (rows < 3) {
            assert_int_equal(step, (rows + 1) * 100);
            for (int k = 0; k < 4; k++) {
                const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, tags[k]);
                assert_true(cJSON_IsNumber(v));
                double want = (rows == 2 && k == 0) ? 2.75 : (rows + 1) * 1.5 + k * 0.125 + 1e-7;
                assert_true(fabs(v->valuedouble - want) <= 1e-14 * fabs(want));
            }
        }
        if (rows == 2)
            assert_true(cJSON_IsNull(cJSON_GetObjectItemCaseSensitive(o, "weird \"tag\"\\")));
        if (rows == 3) {
            assert_int_equal(step, 1LL << 40);
            assert_true(cJSON_GetObjectItem(o, "big")->valuedouble == 123456789.25);
        }
        cJSON_Delete(o);
    }
    assert_int_equal(rows, 4);
    free(text);

    /* a second sink on the same folder appends to the JSONL and opens its own event file */
    assert_int_equal(metrics_open(&m, dir), ZY_OK);
    assert_string_not_equal(metrics_events_path(m), events_path);
    assert_int_equal(metrics_scalar(m, "loss", 400, 1.0), ZY_OK);
    assert_int_equal(metrics_flush(m), ZY_OK);
    /* flushed: visible to a reader before close */
    assert_int_equal(zy_read_file(jsonl_path, &text, &len), ZY_OK);
    int lines = 0;
    for (size_t i = 0; i < len; i++) lines += text[i] == '\n';
    assert_int_equal(lines, 5);
    free(text);
    assert_int_equal(metrics_close(m), ZY_OK);
    int files = 0;
    DIR *d = opendir(dir);
    for (struct dirent *de; (de = readdir(d));)
        files += !strncmp(de->d_name, "events.out.tfevents.", 20);
    closedir(d);
    assert_int_equal(files, 2);
}

static void test_bad_inputs(void **state) {
    (void)state;
    char file[128], dir[160];
    snprintf(file, sizeof file, "%s/plainfile", tmpdir);
    assert_int_equal(zy_write_file_atomic(file, "x", 1), ZY_OK);
    snprintf(dir, sizeof dir, "%s/sub", file);
    zy_metrics *m = (zy_metrics *)1;
    assert_int_equal(metrics_open(&m, dir), ZY_ERR);
    assert_null(m);
    assert_non_null(strstr(zy_errmsg(), file));

    snprintf(dir, sizeof dir, "%s/ok", tmpdir);
    assert_int_equal(metrics_open(&m, dir), ZY_OK);
    assert_int_equal(metrics_scalar(m, "", 1, 1.0), ZY_ERR);
    assert_int_equal(metrics_scalar(m, "step", 1, 1.0), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "reserved"));
    assert_int_equal(metrics_close(m), ZY_OK);
    assert_int_equal(metrics_close(NULL), ZY_OK);
}

static void test_progress_line(void **state) {
    (void)state;
    char buf[160];
    /* ETA = 123 s * (2000 - 120) / 120 = 1926.5 s -> 1927 s = 32m07s */
    progress_line(buf, sizeof buf, 120, 2000, 3.2144, 41234, 123);
    assert_string_equal(buf,
                        "step 120/2000 | loss 3.214 | 41.2k tok/s | 2m03s elapsed | ETA 32m07s");
    /* 3725 s = 1h02m05s; ETA 3725 * 1 = 3725 s; 1.5e6 tok/s */
    progress_line(buf, sizeof buf, 50, 100, 10.0, 1.5e6, 3725);
    assert_string_equal(
        buf, "step 50/100 | loss 10.000 | 1.50M tok/s | 1h02m05s elapsed | ETA 1h02m05s");
    progress_line(buf, sizeof buf, 0, 0, NAN, 812.2, 9.4);
    assert_string_equal(buf, "step 0 | loss nan | 812 tok/s | 9s elapsed | ETA --");
    progress_line(buf, sizeof buf, 10, 10, 1.0, -1, 90061);
    assert_string_equal(buf, "step 10/10 | loss 1.000 | -- tok/s | 1d01h01m elapsed | ETA 0s");
    /* a short buffer truncates but reports the full length */
    int n = progress_line(buf, 8, 120, 2000, 3.2144, 41234, 123);
    assert_int_equal(n, 69);
    assert_string_equal(buf, "step 12");
}

static void write_text(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void check_png_header(const char *path) {
    char *data;
    size_t len;
    assert_int_equal(zy_read_file(path, &data, &len), ZY_OK);
    assert_true(len > 33);
    assert_memory_equal(data, "\x89PNG\r\n\x1a\n\0\0\0\x0dIHDR", 16);
    free(data);
}

static void test_plot_loss(void **state) {
    (void)state;
    char jl[128], png[128];
    snprintf(jl, sizeof jl, "%s/m.jsonl", tmpdir);
    snprintf(png, sizeof png, "%s/loss.png", tmpdir);
    /* a resumed run replays steps 3..4; the last line was cut mid-write */
    write_text(jl, "{\"step\":1,\"loss\":5.0}\n"
                   "{\"step\":2,\"loss\":4.0,\"val_loss\":4.5}\n"
                   "\n"
                   "{\"step\":3,\"loss\":3.5}\n"
                   "{\"step\":4,\"loss\":null,\"val_loss\":3.9}\n"
                   "{\"step\":3,\"loss\":3.4}\n"
                   "{\"step\":4,\"loss\":3.2,\"lr\":0.001}\n"
                   "{\"step\":5,\"lo");
    assert_int_equal(metrics_plot_loss(jl, png), ZY_OK);
    check_png_header(png);

    /* the loss curve of a real sink's file */
    char dir[128];
    snprintf(dir, sizeof dir, "%s/run2", tmpdir);
    zy_metrics *m;
    assert_int_equal(metrics_open(&m, dir), ZY_OK);
    for (int s = 0; s < 300; s++) {
        assert_int_equal(metrics_scalar(m, "loss", s, 3 + 8 * exp(-s / 60.0)), ZY_OK);
        if (s % 50 == 0)
            assert_int_equal(metrics_scalar(m, "val_loss", s, 3.2 + 8 * exp(-s / 60.0)), ZY_OK);
    }
    char path[4096];
    snprintf(path, sizeof path, "%s", metrics_jsonl_path(m));
    assert_int_equal(metrics_close(m), ZY_OK);
    assert_int_equal(metrics_plot_loss(path, png), ZY_OK);
    check_png_header(png);
}

static void test_plot_loss_bad_input(void **state) {
    (void)state;
    char jl[128], png[128], missing[128];
    snprintf(jl, sizeof jl, "%s/bad.jsonl", tmpdir);
    snprintf(png, sizeof png, "%s/bad.png", tmpdir);
    snprintf(missing, sizeof missing, "%s/none.jsonl", tmpdir);
    assert_int_equal(metrics_plot_loss(missing, png), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), missing));

    write_text(jl,
               "{\"step\":1,\"loss\":5.0}\n{\"step\":2,\"loss\":4\n{\"step\":3,\"loss\":3.0}\n");
    assert_int_equal(metrics_plot_loss(jl, png), ZY_ERR);
    char want[160];
    snprintf(want, sizeof want, "%s:2:", jl);
    assert_non_null(strstr(zy_errmsg(), want));

    write_text(jl, "{\"step\":1,\"loss\":5.0}\n[1,2]\n");
    assert_int_equal(metrics_plot_loss(jl, png), ZY_ERR);
    snprintf(want, sizeof want, "%s:2:", jl);
    assert_non_null(strstr(zy_errmsg(), want));

    write_text(jl, "{\"loss\":5.0}\n");
    assert_int_equal(metrics_plot_loss(jl, png), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "\"step\""));

    write_text(jl, "{\"step\":1,\"lr\":0.1}\n");
    assert_int_equal(metrics_plot_loss(jl, png), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "no \"loss\""));
    assert_false(zy_path_exists(png)); /* nothing written on failure */
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_crc32c),     cmocka_unit_test(test_events_and_jsonl_roundtrip),
        cmocka_unit_test(test_bad_inputs), cmocka_unit_test(test_progress_line),
        cmocka_unit_test(test_plot_loss),  cmocka_unit_test(test_plot_loss_bad_input),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
