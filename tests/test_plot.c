/* Tests of src/base/png.c, plot.c and font.c. PNG files are read back by a decoder written here
 * independently of the encoder: chunk CRCs by the bitwise CRC-32, an inflater for stored and
 * fixed-Huffman deflate blocks built from the RFC 1951 tables, Adler-32 by its definition, and the
 * five PNG row filters undone. Plots are then checked by where their colours land. */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "base/err.h"
#include "base/fileio.h"
#include "base/font.h"
#include "base/plot.h"
#include "base/png.h"
#include "base/rng.h"
#include "train/metrics.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* ---- independent reference decoder ---------------------------------------------------------- */

static uint32_t ref_crc32(const uint8_t *p, size_t n) {
    uint32_t c = 0xFFFFFFFFu;
    for (size_t i = 0; i < n; i++) {
        c ^= p[i];
        for (int k = 0; k < 8; k++) c = (c >> 1) ^ (0xEDB88320u & (0u - (c & 1u)));
    }
    return ~c;
}

static uint32_t ref_adler32(const uint8_t *p, size_t n) {
    uint64_t a = 1, b = 0;
    for (size_t i = 0; i < n; i++) {
        a = (a + p[i]) % 65521;
        b = (b + a) % 65521;
    }
    return (uint32_t)(b << 16 | a);
}

static uint32_t be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

typedef struct {
    const uint8_t *p;
    size_t n, pos; /* pos in bits */
    int err;
} bitreader;

static unsigned getbits(bitreader *b, int n) {
    unsigned v = 0;
    for (int i = 0; i < n; i++) {
        if (b->pos >= b->n * 8) {
            b->err = 1;
            return 0;
        }
        v |= (unsigned)((b->p[b->pos >> 3] >> (b->pos & 7)) & 1) << i;
        b->pos++;
    }
    return v;
}

/* Fixed literal/length symbol: codes read most significant bit first (RFC 1951, 3.2.6). */
static int fixed_litlen(bitreader *b) {
    unsigned code = 0;
    for (int len = 1; len <= 9; len++) {
        code = code << 1 | getbits(b, 1);
        if (len == 7 && code <= 0x17) return 256 + (int)code;
        if (len == 8 && code >= 0x30 && code <= 0xBF) return (int)code - 0x30;
        if (len == 8 && code >= 0xC0 && code <= 0xC7) return 280 + (int)code - 0xC0;
        if (len == 9 && code >= 0x190) return 144 + (int)code - 0x190;
    }
    b->err = 1;
    return -1;
}

/* Inflates a raw deflate stream of stored and fixed-Huffman blocks; returns bytes, -1 on error. */
static long ref_inflate(const uint8_t *src, size_t n, uint8_t *dst, size_t cap, size_t *used) {
    static const int lbase[29] = {3,  4,  5,  6,  7,  8,  9,  10, 11,  13,  15,  17,  19,  23, 27,
                                  31, 35, 43, 51, 59, 67, 83, 99, 115, 131, 163, 195, 227, 258};
    static const int lext[29] = {0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2,
                                 2, 3, 3, 3, 3, 4, 4, 4, 4, 5, 5, 5, 5, 0};
    static const int dbase[30] = {1,    2,    3,    4,    5,    7,    9,    13,    17,    25,
                                  33,   49,   65,   97,   129,  193,  257,  385,   513,   769,
                                  1025, 1537, 2049, 3073, 4097, 6145, 8193, 12289, 16385, 24577};
    static const int dext[30] = {0, 0, 0, 0, 1, 1, 2, 2,  3,  3,  4,  4,  5,  5,  6,
                                 6, 7, 7, 8, 8, 9, 9, 10, 10, 11, 11, 12, 12, 13, 13};
    bitreader b = {src, n, 0, 0};
    size_t out = 0;
    int final;
    do {
        final = (int)getbits(&b, 1);
        unsigned type = getbits(&b, 2);
        if (type == 0) {
            b.pos = (b.pos + 7) & ~(size_t)7;
            size_t at = b.pos / 8;
            if (at + 4 > n) return -1;
            unsigned len = src[at] | src[at + 1] << 8, nlen = src[at + 2] | src[at + 3] << 8;
            if ((len ^ 0xFFFF) != nlen || at + 4 + len > n || out + len > cap) return -1;
            memcpy(dst + out, src + at + 4, len);
            out += len;
            b.pos = (at + 4 + len) * 8;
        } else if (type == 1) {
            for (;;) {
                int s = fixed_litlen(&b);
                if (b.err) return -1;
                if (s < 256) {
                    if (out >= cap) return -1;
                    dst[out++] = (uint8_t)s;
                    continue;
                }
                if (s == 256) break;
                if (s > 285) return -1;
                int len = lbase[s - 257] + (int)getbits(&b, lext[s - 257]);
                unsigned dcode = 0;
                for (int i = 0; i < 5; i++) dcode = dcode << 1 | getbits(&b, 1);
                if (dcode > 29) return -1;
                size_t dist = (size_t)dbase[dcode] + getbits(&b, dext[dcode]);
                if (b.err || dist > out || out + (size_t)len > cap) return -1;
                for (int i = 0; i < len; i++, out++) dst[out] = dst[out - dist];
            }
        } else {
            return -1; /* dynamic Huffman: the encoder under test never writes it */
        }
        if (b.err) return -1;
    } while (!final);
    *used = (b.pos + 7) / 8;
    return (long)out;
}

static int paeth_ref(int a, int b, int c) {
    int p = a + b - c, pa = abs(p - a), pb = abs(p - b), pc = abs(p - c);
    if (pa <= pb && pa <= pc) return a;
    return pb <= pc ? b : c;
}

typedef struct {
    int w, h;
    uint8_t *rgb; /* [h][w][3] */
} image;

/* Decodes a PNG written by us, asserting every structural property on the way. */
static image decode_png_bytes(const uint8_t *p, size_t n) {
    image im = {0};
    assert_true(n > 8 + 25 + 12 + 12);
    assert_memory_equal(p, "\x89PNG\r\n\x1a\n", 8);
    size_t at = 8, idat_len = 0;
    uint8_t *idat = NULL;
    int nchunk = 0, seen_end = 0;
    while (at < n) {
        assert_true(at + 12 <= n);
        uint32_t len = be32(p + at);
        assert_true(at + 12 + len <= n);
        const uint8_t *type = p + at + 4, *data = p + at + 8;
        assert_int_equal(be32(data + len), ref_crc32(type, len + 4));
        if (nchunk == 0) {
            assert_memory_equal(type, "IHDR", 4);
            assert_int_equal(len, 13);
            im.w = (int)be32(data);
            im.h = (int)be32(data + 4);
            assert_int_equal(data[8], 8);  /* bit depth */
            assert_int_equal(data[9], 2);  /* RGB */
            assert_int_equal(data[10], 0); /* deflate */
            assert_int_equal(data[11], 0); /* filter method */
            assert_int_equal(data[12], 0); /* no interlace */
        } else if (!memcmp(type, "IDAT", 4)) {
            idat = realloc(idat, idat_len + len);
            memcpy(idat + idat_len, data, len);
            idat_len += len;
        } else if (!memcmp(type, "IEND", 4)) {
            assert_int_equal(len, 0);
            seen_end = 1;
        }
        at += 12 + len;
        nchunk++;
    }
    assert_int_equal(at, n);
    assert_true(seen_end);
    assert_true(im.w > 0 && im.h > 0 && idat_len > 6);
    /* zlib: CM 8, window <= 32K, check bits, no preset dictionary */
    assert_int_equal(idat[0] & 15, 8);
    assert_true((idat[0] >> 4) <= 7);
    assert_int_equal((idat[0] * 256 + idat[1]) % 31, 0);
    assert_int_equal(idat[1] & 0x20, 0);
    size_t stride = (size_t)im.w * 3, raw_len = (stride + 1) * im.h, used = 0;
    uint8_t *raw = malloc(raw_len + 1);
    long got = ref_inflate(idat + 2, idat_len - 6, raw, raw_len + 1, &used);
    assert_int_equal(got, (long)raw_len);
    assert_int_equal(2 + used + 4, idat_len);
    assert_int_equal(be32(idat + idat_len - 4), ref_adler32(raw, raw_len));
    im.rgb = malloc(stride * im.h);
    for (int y = 0; y < im.h; y++) {
        const uint8_t *f = raw + y * (stride + 1) + 1;
        uint8_t *cur = im.rgb + y * stride, *up = y ? cur - stride : NULL;
        int ft = f[-1];
        assert_true(ft <= 4);
        for (size_t i = 0; i < stride; i++) {
            int a = i >= 3 ? cur[i - 3] : 0, b = up ? up[i] : 0, c = (up && i >= 3) ? up[i - 3] : 0;
            int pred = ft == 0   ? 0
                       : ft == 1 ? a
                       : ft == 2 ? b
                       : ft == 3 ? (a + b) / 2
                                 : paeth_ref(a, b, c);
            cur[i] = (uint8_t)(f[i] + pred);
        }
    }
    free(raw);
    free(idat);
    return im;
}

static image decode_png_file(const char *path) {
    char *data;
    size_t len;
    assert_int_equal(zy_read_file(path, &data, &len), ZY_OK);
    image im = decode_png_bytes((const uint8_t *)data, len);
    free(data);
    return im;
}

static const uint8_t *pix(const image *im, int x, int y) {
    return im->rgb + ((size_t)y * im->w + x) * 3;
}

static int is_rgb(const image *im, int x, int y, int r, int g, int b) {
    const uint8_t *p = pix(im, x, y);
    return p[0] == r && p[1] == g && p[2] == b;
}

static long count_rgb(const image *im, int r, int g, int b) {
    long n = 0;
    for (int y = 0; y < im->h; y++)
        for (int x = 0; x < im->w; x++) n += is_rgb(im, x, y, r, g, b);
    return n;
}

static char tmpdir[64];

static int setup(void **state) {
    (void)state;
    snprintf(tmpdir, sizeof tmpdir, "/tmp/zy_plot_XXXXXX");
    return mkdtemp(tmpdir) ? 0 : -1;
}

static int teardown(void **state) {
    (void)state;
    return zy_remove_tree(tmpdir);
}

static void tmp_path(char *buf, size_t n, const char *name) {
    snprintf(buf, n, "%s/%s", tmpdir, name);
}

/* The series colours plot.c documents: tab10, first two. */
#define BLUE   31, 119, 180
#define ORANGE 255, 127, 14

/* ---- PNG encoder -------------------------------------------------------------------------- */

static void check_roundtrip(const uint8_t *rgb, int w, int h) {
    uint8_t *png;
    size_t len;
    png_encode_rgb(rgb, w, h, &png, &len);
    image im = decode_png_bytes(png, len);
    assert_int_equal(im.w, w);
    assert_int_equal(im.h, h);
    assert_memory_equal(im.rgb, rgb, (size_t)w * h * 3);
    free(im.rgb);
    free(png);
}

static void test_png_roundtrip_random(void **state) {
    (void)state;
    zy_rng r = zy_rng_init(7, 0);
    int sizes[][2] = {{1, 1}, {2, 3}, {37, 23}, {128, 5}};
    for (size_t s = 0; s < sizeof sizes / sizeof *sizes; s++) {
        int w = sizes[s][0], h = sizes[s][1];
        uint8_t *rgb = malloc((size_t)w * h * 3);
        for (int i = 0; i < w * h * 3; i++) rgb[i] = (uint8_t)zy_rng_u64(&r);
        check_roundtrip(rgb, w, h);
        free(rgb);
    }
}

/* Flat areas and repeats exercise long matches, every length code and far distances. */
static void test_png_roundtrip_repetitive(void **state) {
    (void)state;
    zy_rng r = zy_rng_init(8, 0);
    int w = 700, h = 90;
    uint8_t *rgb = malloc((size_t)w * h * 3);
    memset(rgb, 255, (size_t)w * h * 3);
    for (int y = 0; y < h; y++)
        for (int x = 0; x < w; x++) {
            uint8_t *p = rgb + ((size_t)y * w + x) * 3;
            if ((x / 17 + y / 5) % 3 == 0) p[0] = p[1] = (uint8_t)(x & 0xF0);
            if (zy_rng_below(&r, 50) == 0) p[2] = (uint8_t)zy_rng_u64(&r);
            if (y % 31 == 7) p[1] = (uint8_t)((x * 7) % (1 + zy_rng_below(&r, 300)));
        }
    check_roundtrip(rgb, w, h);
    uint8_t *png;
    size_t len;
    png_encode_rgb(rgb, w, h, &png, &len);
    assert_true(len < (size_t)w * h * 3 / 4); /* compression does something */
    free(png);
    free(rgb);
}

/* ---- font ---------------------------------------------------------------------------------- */

static void test_font_glyphs(void **state) {
    (void)state;
    for (int c = 32; c <= 126; c++) {
        int ink = 0, below = 0;
        for (int row = 0; row < FONT_H; row++)
            for (int col = 0; col < FONT_W; col++) {
                ink += font_pixel(c, col, row);
                below += row >= 7 && font_pixel(c, col, row);
            }
        if (c == ' ')
            assert_int_equal(ink, 0);
        else
            assert_true(ink >= 1);
        /* only characters with descenders reach below the baseline */
        if (!strchr("gjpqy,_|", c)) assert_int_equal(below, 0);
    }
    /* distinct glyphs for characters that are easy to confuse */
    const char *pairs[] = {"0O", "1l", "5S", "8B", "il", "-_"};
    for (size_t i = 0; i < sizeof pairs / sizeof *pairs; i++) {
        int differ = 0;
        for (int row = 0; row < FONT_H; row++)
            for (int col = 0; col < FONT_W; col++)
                differ += font_pixel(pairs[i][0], col, row) != font_pixel(pairs[i][1], col, row);
        assert_true(differ > 0);
    }
    assert_int_equal(font_pixel('A', -1, 0), 0);
    assert_int_equal(font_pixel('A', 0, FONT_H), 0);
}

/* ---- line charts ----------------------------------------------------------------------------- */

static void test_lines_default_size_and_background(void **state) {
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "default.png");
    double x[3] = {0, 1, 2}, y[3] = {1, 3, 2};
    zy_series s = {"a", x, y, 3};
    assert_int_equal(plot_lines_png(path, NULL, &s, 1), ZY_OK);
    image im = decode_png_file(path);
    assert_int_equal(im.w, 960);
    assert_int_equal(im.h, 600);
    assert_true(is_rgb(&im, 0, 0, 255, 255, 255));
    assert_true(is_rgb(&im, im.w - 1, im.h - 1, 255, 255, 255));
    free(im.rgb);

    zy_plot_opts o = {.title = "T", .width = 333, .height = 222};
    assert_int_equal(plot_lines_png(path, &o, &s, 1), ZY_OK);
    im = decode_png_file(path);
    assert_int_equal(im.w, 333);
    assert_int_equal(im.h, 222);
    free(im.rgb);
}

/* Columns holding pixels of one exact colour, with their mean row (-1 where none). */
static void colour_columns(const image *im, int r, int g, int b, double *mean_row) {
    for (int x = 0; x < im->w; x++) {
        double s = 0;
        int k = 0;
        for (int y = 0; y < im->h; y++)
            if (is_rgb(im, x, y, r, g, b)) s += y, k++;
        mean_row[x] = k ? s / k : -1;
    }
}

/* y = x rises from the bottom left to the top right: the line's rows fall as columns grow. */
static void test_lines_rising_line(void **state) {
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "rise.png");
    double xs[101], ys[101];
    for (int i = 0; i <= 100; i++) xs[i] = ys[i] = i / 10.0;
    zy_series s = {NULL, xs, ys, 101}; /* no label: no legend crossing the line */
    zy_plot_opts o = {.xlabel = "x", .ylabel = "y"};
    assert_int_equal(plot_lines_png(path, &o, &s, 1), ZY_OK);
    image im = decode_png_file(path);
    double *m = malloc(sizeof(double) * im.w);
    colour_columns(&im, BLUE, m);
    int cols = 0, first = -1, last = -1;
    double prev = 1e9;
    for (int x = 0; x < im.w; x++) {
        if (m[x] < 0) continue;
        cols++;
        if (first < 0) first = x;
        last = x;
        assert_true(m[x] <= prev + 0.5); /* never goes down on screen by more than AA noise */
        prev = m[x];
    }
    assert_true(cols > im.w / 2);
    assert_true(m[first] - m[last] > im.h / 2); /* spans most of the height */
    free(m);
    free(im.rgb);
}

/* NaN points are skipped: a constant series with NaN in its middle fifth draws two pieces. */
static void test_lines_nan_gap(void **state) {
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "gap.png");
    double xs[100], ys[100];
    for (int i = 0; i < 100; i++)
        xs[i] = i, ys[i] = (i >= 40 && i < 60) ? NAN : 5.0 + (i % 2) * 0.01;
    zy_series s = {NULL, xs, ys, 100};
    assert_int_equal(plot_lines_png(path, NULL, &s, 1), ZY_OK);
    image im = decode_png_file(path);
    double *m = malloc(sizeof(double) * im.w);
    colour_columns(&im, BLUE, m);
    int runs = 0, gap_start = -1, gap_len = 0, longest_gap = 0, first = -1, last = -1;
    for (int x = 0; x < im.w; x++) {
        if (m[x] >= 0) {
            if (first < 0) first = x;
            if (x == 0 || m[x - 1] < 0) runs++;
            if (gap_start >= 0 && gap_len > longest_gap) longest_gap = gap_len;
            gap_start = -1;
            last = x;
        } else if (first >= 0) {
            if (gap_start < 0) gap_start = x, gap_len = 0;
            gap_len++;
        }
    }
    assert_int_equal(runs, 2);
    /* points 39 and 60 are 21 of 99 steps apart */
    double expect = (last - first) * 21.0 / 99.0;
    assert_true(fabs(longest_gap - expect) < 6);
    free(m);
    free(im.rgb);
}

static void test_lines_two_series_legend_title(void **state) {
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "two.png");
    double xs[50], a[50], b[50];
    for (int i = 0; i < 50; i++) xs[i] = i, a[i] = sin(i * 0.2), b[i] = cos(i * 0.2);
    zy_series s[2] = {{"sin", xs, a, 50}, {"cos", xs, b, 50}};
    zy_plot_opts o = {.title = "Two", .width = 640, .height = 400};
    assert_int_equal(plot_lines_png(path, &o, s, 2), ZY_OK);
    image im = decode_png_file(path);
    assert_true(count_rgb(&im, BLUE) > 200);
    assert_true(count_rgb(&im, ORANGE) > 200);
    long title_ink = 0;
    for (int y = 0; y < 40; y++)
        for (int x = 0; x < im.w; x++) title_ink += is_rgb(&im, x, y, 0, 0, 0);
    assert_true(title_ink > 20);
    free(im.rgb);

    /* without a title the top band stays white */
    o.title = NULL;
    assert_int_equal(plot_lines_png(path, &o, s, 2), ZY_OK);
    im = decode_png_file(path);
    for (int y = 0; y < 15; y++)
        for (int x = 0; x < im.w; x++) assert_true(is_rgb(&im, x, y, 255, 255, 255));
    free(im.rgb);
}

/* Log axes: non-positive values are skipped like NaN; base 2 and base 10 both draw. */
static void test_lines_log_axes(void **state) {
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "log.png");
    double x[24], y[24];
    for (int i = 0; i < 24; i++) x[i] = ldexp(1, i), y[i] = i == 5 ? 0 : i == 6 ? -3 : 1e-3 * x[i];
    zy_series s = {"bw", x, y, 24};
    zy_plot_opts o = {.log_x = 2, .log_y = 1};
    assert_int_equal(plot_lines_png(path, &o, &s, 1), ZY_OK);
    image im = decode_png_file(path);
    assert_true(count_rgb(&im, BLUE) > 300);
    free(im.rgb);
    /* a range within one decade still gets ticks; all-NaN data draws empty axes */
    double y2[3] = {2, 3, 5}, y3[3] = {NAN, NAN, NAN};
    zy_series s2[2] = {{"narrow", x, y2, 3}, {"nothing", x, y3, 3}};
    o.log_x = 0;
    assert_int_equal(plot_lines_png(path, &o, s2, 2), ZY_OK);
    assert_int_equal(plot_lines_png(path, &o, NULL, 0), ZY_OK);
}

static void test_lines_bad_input(void **state) {
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "keep.png");
    double x[2] = {0, 1}, y[2] = {0, 1};
    zy_series s = {"a", x, y, 2};
    assert_int_equal(plot_lines_png(path, NULL, &s, 1), ZY_OK);
    char *before;
    size_t before_len;
    assert_int_equal(zy_read_file(path, &before, &before_len), ZY_OK);

    zy_series bad = {"a", NULL, y, 2};
    assert_int_equal(plot_lines_png(path, NULL, &bad, 1), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), path));
    assert_non_null(strstr(zy_errmsg(), "series 0"));
    zy_plot_opts tiny = {.width = 20, .height = 20};
    assert_int_equal(plot_lines_png(path, &tiny, &s, 1), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "20x20"));
    zy_plot_opts badlog = {.log_x = 3};
    assert_int_equal(plot_lines_png(path, &badlog, &s, 1), ZY_ERR);
    assert_int_equal(plot_lines_png(path, NULL, &s, -1), ZY_ERR);
    assert_int_equal(plot_heatmap_png(path, "t", NULL, NULL, y, 0, 2, NULL, NULL), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), "0x2"));

    /* failures left the good file as it was */
    char *after;
    size_t after_len;
    assert_int_equal(zy_read_file(path, &after, &after_len), ZY_OK);
    assert_int_equal(after_len, before_len);
    assert_memory_equal(after, before, before_len);
    free(before);
    free(after);

    char missing[160];
    snprintf(missing, sizeof missing, "%s/no/such/dir/p.png", tmpdir);
    assert_int_equal(plot_lines_png(missing, NULL, &s, 1), ZY_ERR);
    assert_non_null(strstr(zy_errmsg(), missing));
}

/* ---- heatmaps -------------------------------------------------------------------------------- */

/* The ends of the colour scale are viridis' ends, dark purple and yellow (matplotlib's values). */
#define VMIN_RGB 68, 1, 84
#define VMAX_RGB 253, 231, 37

static void test_heatmap_colours_and_blank(void **state) {
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "heat.png");
    double v[3] = {-2.0, NAN, 7.5};
    const char *cols[3] = {"a", "b", "c"}, *rows[1] = {"r"};
    assert_int_equal(plot_heatmap_png(path, "H", "x", "y", v, 1, 3, rows, cols), ZY_OK);
    image im = decode_png_file(path);
    /* the two valid cells are solid in the scale's end colours (apart from their value text) */
    long lo = count_rgb(&im, VMIN_RGB), hi = count_rgb(&im, VMAX_RGB);
    assert_true(lo > 1000);
    assert_true(hi > 1000);
    /* the first min-colour pixel in reading order is the top-left corner of cell 0 (the colour
     * bar starts on the same row but further right); its run along that row is the cell width */
    int x0 = -1, y0 = -1;
    for (int y = 0; y < im.h && x0 < 0; y++)
        for (int x = 0; x < im.w; x++)
            if (is_rgb(&im, x, y, VMIN_RGB)) {
                x0 = x, y0 = y;
                break;
            }
    assert_true(x0 >= 0);
    int w0 = 0;
    while (is_rgb(&im, x0 + w0, y0, VMIN_RGB)) w0++;
    assert_true(w0 >= 20);
    /* cells follow at a pitch of w0 or w0 + 1 (a hairline between them): the NaN cell is blank,
     * the third cell has the top colour near its corners (away from its value text) */
    assert_true(is_rgb(&im, x0 + w0 + 1 + w0 / 2, y0 + w0 / 2, 255, 255, 255));
    assert_true(is_rgb(&im, x0 + w0 + 3, y0 + 2, 255, 255, 255));
    assert_true(is_rgb(&im, x0 + 2 * (w0 + 1) + 2, y0 + 2, VMAX_RGB));
    assert_true(is_rgb(&im, x0 + 3 * w0 - 3, y0 + w0 - 3, VMAX_RGB));
    free(im.rgb);
}

/* A larger map (index labels, tiny cells, no annotations) and a constant one still encode. */
static void test_heatmap_shapes(void **state) {
    (void)state;
    char path[128];
    tmp_path(path, sizeof path, "big.png");
    double *v = malloc(sizeof(double) * 60 * 150);
    for (int i = 0; i < 60 * 150; i++) v[i] = i;
    assert_int_equal(plot_heatmap_png(path, NULL, NULL, NULL, v, 60, 150, NULL, NULL), ZY_OK);
    image im = decode_png_file(path);
    assert_true(count_rgb(&im, VMIN_RGB) >= 9);
    free(im.rgb);
    double c[4] = {3, 3, 3, 3};
    assert_int_equal(plot_heatmap_png(path, "const", NULL, NULL, c, 2, 2, NULL, NULL), ZY_OK);
    free(v);
}

/* The loss plot of a multi-phase run: a dashed grey line (150,150,150 as plot.c draws marks)
 * where the metrics' "phase" changes, between the steps on either side (4 and 5 here: found from
 * where the train-loss line's ends land); none when no phase changes. */
static void write_metrics(const char *path, int with_phase) {
    FILE *f = fopen(path, "w");
    assert_non_null(f);
    for (int step = 1; step <= 10; step++) {
        fprintf(f, "{\"step\":%d,\"loss\":%g", step, 10.0 - step);
        if (with_phase) fprintf(f, ",\"phase\":%d", step <= 4 ? 0 : 1);
        fprintf(f, "}\n");
    }
    assert_int_equal(fclose(f), 0);
}

static void test_loss_plot_phase_marks(void **state) {
    (void)state;
    char jsonl[128], png[128];
    tmp_path(jsonl, sizeof jsonl, "metrics.jsonl");
    tmp_path(png, sizeof png, "loss.png");
    for (int with_phase = 0; with_phase < 2; with_phase++) {
        write_metrics(jsonl, with_phase);
        assert_int_equal(metrics_plot_loss(jsonl, png), ZY_OK);
        image im = decode_png_file(png);
        if (!with_phase) {
            assert_int_equal(count_rgb(&im, 150, 150, 150), 0);
            free(im.rgb);
            continue;
        }
        double *blue = malloc(sizeof(double) * im.w);
        colour_columns(&im, BLUE, blue);
        int first = -1, last = -1, mark_cols = 0, mark_x = -1;
        long mark_px = 0;
        for (int x = 0; x < im.w; x++) {
            if (blue[x] >= 0 && first < 0) first = x;
            if (blue[x] >= 0) last = x;
            int k = 0;
            for (int y = 0; y < im.h; y++) k += is_rgb(&im, x, y, 150, 150, 150);
            if (k) mark_cols++, mark_x = x, mark_px += k;
        }
        /* the line's ends carry round markers (radius 3): its steps 1 and 10 lie 3 px inside */
        const double x1 = first + 3, x10 = last - 3, want = x1 + (4.5 - 1) / 9 * (x10 - x1);
        print_message("mark at column %d (expected %.1f), %d columns, %ld pixels\n", mark_x, want,
                      mark_cols, mark_px);
        assert_true(mark_cols >= 1 && mark_cols <= 2);
        assert_true(fabs(mark_x - want) <= 3);
        assert_true(mark_px > im.h / 4); /* dashes down most of the plot's height */
        assert_true(mark_px < im.h);     /* dashed: gaps between them */
        free(blue);
        free(im.rgb);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_png_roundtrip_random),
        cmocka_unit_test(test_png_roundtrip_repetitive),
        cmocka_unit_test(test_font_glyphs),
        cmocka_unit_test(test_lines_default_size_and_background),
        cmocka_unit_test(test_lines_rising_line),
        cmocka_unit_test(test_lines_nan_gap),
        cmocka_unit_test(test_lines_two_series_legend_title),
        cmocka_unit_test(test_lines_log_axes),
        cmocka_unit_test(test_lines_bad_input),
        cmocka_unit_test(test_heatmap_colours_and_blank),
        cmocka_unit_test(test_heatmap_shapes),
        cmocka_unit_test(test_loss_plot_phase_marks),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
