/* PNG line charts and heatmaps with no outside library (see plot.h). Owns the whole path from
 * numbers to file: an RGB canvas, anti-aliased lines, text in the built-in bitmap font (font.h),
 * 1-2-5 and logarithmic tick placement, legends and colour bars; png.c writes the file. */
#include "base/plot.h"

#include "base/err.h"
#include "base/fileio.h"
#include "base/font.h"
#include "base/png.h"

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ---------------------------------------------------------------------------------------------- */
/* Canvas and drawing primitives */

typedef struct {
    uint8_t r, g, b;
} rgb;

typedef struct {
    int w, h;
    uint8_t *px; /* [h][w][3] */
} canvas;

static const rgb WHITE = {255, 255, 255}, BLACK = {0, 0, 0}, INK = {34, 34, 34};
static const rgb GRID = {232, 232, 232}, GRID_MINOR = {244, 244, 244}, FRAME = {90, 90, 90};
static const rgb MARK = {150, 150, 150}; /* the dashed vertical marks */

/* Series colours: the "tab10" qualitative palette, chosen to stay distinct for the colour-blind. */
static const rgb PALETTE[10] = {{31, 119, 180},  {255, 127, 14}, {44, 160, 44},   {214, 39, 40},
                                {148, 103, 189}, {140, 86, 75},  {227, 119, 194}, {127, 127, 127},
                                {188, 189, 34},  {23, 190, 207}};

#define TEXT_SCALE 2 /* labels are the 5x7 font at twice its size: 14 px capitals */
#define CAP_H      7 /* font rows above the baseline */

static void canvas_init(canvas *c, int w, int h) {
    c->w = w;
    c->h = h;
    c->px = zy_malloc((size_t)w * h * 3);
    memset(c->px, 255, (size_t)w * h * 3);
}

static void canvas_free(canvas *c) {
    free(c->px);
    c->px = NULL;
}

/* Mixes colour col into pixel (x, y) with opacity a in [0, 1]; outside the canvas is a no-op. */
static void blend(canvas *c, int x, int y, rgb col, double a) {
    if (x < 0 || y < 0 || x >= c->w || y >= c->h || a <= 0) return;
    uint8_t *p = c->px + ((size_t)y * c->w + x) * 3;
    if (a >= 1) {
        p[0] = col.r, p[1] = col.g, p[2] = col.b;
        return;
    }
    p[0] = (uint8_t)lrint(p[0] + (col.r - p[0]) * a);
    p[1] = (uint8_t)lrint(p[1] + (col.g - p[1]) * a);
    p[2] = (uint8_t)lrint(p[2] + (col.b - p[2]) * a);
}

/* Fills the rectangle [x0, x1) x [y0, y1). */
static void fill_rect(canvas *c, int x0, int y0, int x1, int y1, rgb col, double a) {
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) blend(c, x, y, col, a);
}

/* Outlines the rectangle [x0, x1) x [y0, y1) with 1 px lines. */
static void stroke_rect(canvas *c, int x0, int y0, int x1, int y1, rgb col) {
    fill_rect(c, x0, y0, x1, y0 + 1, col, 1);
    fill_rect(c, x0, y1 - 1, x1, y1, col, 1);
    fill_rect(c, x0, y0, x0 + 1, y1, col, 1);
    fill_rect(c, x1 - 1, y0, x1, y1, col, 1);
}

/* Coverage layer: a float per pixel in [0, 1], so overlapping pieces of one anti-aliased stroke
 * (segment joints, markers) take the maximum instead of darkening where they overlap. */
typedef struct {
    int w, h;
    int x0, y0, x1, y1; /* clip rectangle [x0, x1) x [y0, y1) */
    float *a;           /* [h][w] */
} layer;

static void layer_put(layer *l, int x, int y, double a) {
    if (x < l->x0 || y < l->y0 || x >= l->x1 || y >= l->y1 || a <= 0) return;
    float *p = &l->a[(size_t)y * l->w + x];
    if (a > 1) a = 1;
    if (a > *p) *p = (float)a;
}

/* Adds a segment (a, b) in pixel coordinates with half-width hw; a zero-length segment is a dot.
 * Only a band around the segment is visited, so long steep segments stay cheap. */
static void layer_segment(layer *l, double ax, double ay, double bx, double by, double hw) {
    if (!(fabs(ax) < 1e6 && fabs(ay) < 1e6 && fabs(bx) < 1e6 && fabs(by) < 1e6)) return;
    double dx = bx - ax, dy = by - ay, len2 = dx * dx + dy * dy, r = hw + 1.0;
    int steep = fabs(dy) > fabs(dx);
    /* visit only the clip rectangle */
    int ulo = steep ? l->y0 : l->x0, uhi = steep ? l->y1 - 1 : l->x1 - 1;
    int vlo = steep ? l->x0 : l->y0, vhi = steep ? l->x1 - 1 : l->y1 - 1;
    /* u runs along the major direction, v across it */
    double au = steep ? ay : ax, bu = steep ? by : bx, av = steep ? ax : ay, bv = steep ? bx : by;
    double umin = fmin(au, bu), umax = fmax(au, bu);
    double slope = (bu != au) ? (bv - av) / (bu - au) : 0;
    for (int u = (int)fmax(floor(umin - r), ulo); u <= (int)fmin(floor(umax + r), uhi); u++) {
        double uc = u + 0.5, lo = fmax(umin, uc - r), hi = fmin(umax, uc + r);
        if (lo > hi) lo = hi = (uc < umin) ? umin : umax;
        double v0 = av + (lo - au) * slope, v1 = av + (hi - au) * slope;
        int vb = (int)fmax(floor(fmin(v0, v1) - r), vlo),
            ve = (int)fmin(floor(fmax(v0, v1) + r), vhi);
        for (int v = vb; v <= ve; v++) {
            double px = steep ? v + 0.5 : uc, py = steep ? uc : v + 0.5;
            double t = len2 > 0 ? ((px - ax) * dx + (py - ay) * dy) / len2 : 0;
            t = t < 0 ? 0 : t > 1 ? 1 : t;
            double d = hypot(px - (ax + t * dx), py - (ay + t * dy));
            layer_put(l, steep ? v : u, steep ? u : v, hw + 0.5 - d);
        }
    }
}

/* Paints the layer onto the canvas in colour col and clears it. */
static void layer_paint(layer *l, canvas *c, rgb col) {
    for (int y = l->y0; y < l->y1; y++)
        for (int x = l->x0; x < l->x1; x++) {
            float *p = &l->a[(size_t)y * l->w + x];
            if (*p > 0) blend(c, x, y, col, *p);
            *p = 0;
        }
}

/* ---------------------------------------------------------------------------------------------- */
/* Text */

/* Width in pixels of s drawn at the given scale. */
static int text_width(const char *s, int scale) {
    int n = (int)strlen(s);
    return n ? (n * FONT_ADVANCE - 1) * scale : 0;
}

/* Draws s with the top of its capitals at (x, y). vertical: rotated a quarter turn
 * counter-clockwise (reading upwards), with (x, y) then the left edge and the bottom end of the
 * text. */
static void draw_text_at(canvas *c, int x, int y, const char *s, int scale, rgb col, int vertical) {
    for (int i = 0; s[i]; i++) {
        int ch = (unsigned char)s[i];
        for (int row = 0; row < FONT_H; row++)
            for (int k = 0; k < FONT_W; k++) {
                if (!font_pixel(ch, k, row)) continue;
                int u = (i * FONT_ADVANCE + k) * scale, v = row * scale;
                for (int a = 0; a < scale; a++)
                    for (int b = 0; b < scale; b++) {
                        if (vertical)
                            blend(c, x + v + b, y - (u + a), col, 1);
                        else
                            blend(c, x + u + a, y + v + b, col, 1);
                    }
            }
    }
}

enum { AL_START, AL_CENTER, AL_END };

/* Draws horizontal text aligned around (x, y): ha along x, va along y (by the capital height). */
static void draw_text(canvas *c, int x, int y, const char *s, int scale, rgb col, int ha, int va) {
    int w = text_width(s, scale), h = CAP_H * scale;
    x -= ha == AL_CENTER ? w / 2 : ha == AL_END ? w : 0;
    y -= va == AL_CENTER ? h / 2 : va == AL_END ? h : 0;
    draw_text_at(c, x, y, s, scale, col, 0);
}

/* Draws text reading upwards, centred on (x, y) along its length, its capitals' top at the left. */
static void draw_text_up(canvas *c, int x, int y, const char *s, int scale, rgb col) {
    draw_text_at(c, x, y + text_width(s, scale) / 2, s, scale, col, 1);
}

/* A title centred on x: the label font doubled sideways by one pixel for a bold face; a title too
 * wide for the canvas drops to the small font, then loses its tail to "...". */
static void draw_title(canvas *c, int x, int y, const char *s) {
    int scale = text_width(s, TEXT_SCALE) + 1 <= c->w - 20 ? TEXT_SCALE : 1;
    char buf[512];
    snprintf(buf, sizeof buf, "%s", s);
    size_t len = strlen(buf);
    while (len > 3 && text_width(buf, scale) + 1 > c->w - 20) memcpy(buf + (--len) - 3, "...", 4);
    int w = text_width(buf, scale);
    if (x - w / 2 < 10) x = 10 + w / 2;
    if (x + w / 2 + 1 > c->w - 10) x = c->w - 10 - w / 2 - 1;
    draw_text(c, x, y + (TEXT_SCALE - scale) * CAP_H / 2, buf, scale, BLACK, AL_CENTER, AL_START);
    draw_text(c, x + 1, y + (TEXT_SCALE - scale) * CAP_H / 2, buf, scale, BLACK, AL_CENTER,
              AL_START);
}

/* ---------------------------------------------------------------------------------------------- */
/* Numbers and ticks */

/* Removes the exponent's '+' and leading zeros ("1.5e+06" -> "1.5e6", "2e-05" -> "2e-5"). */
static void tidy_exponent(char *s) {
    char *e = strchr(s, 'e');
    if (!e) return;
    char *p = e + 1, *q = e + 1;
    if (*p == '+')
        p++;
    else if (*p == '-')
        *q++ = *p++;
    while (*p == '0' && p[1]) p++;
    memmove(q, p, strlen(p) + 1);
}

/* Formats a tick value v on a grid of spacing step, with just the decimals the step needs. */
static void fmt_tick(char *buf, size_t n, double v, double step) {
    if (fabs(v) < step * 1e-6) {
        snprintf(buf, n, "0");
        return;
    }
    double mag = fmax(fabs(v), step);
    if (mag >= 1e6 || step < 1e-4) {
        int digits = (int)floor(log10(mag) + 1e-9) - (int)floor(log10(step) + 1e-9);
        if (digits < 0) digits = 0;
        snprintf(buf, n, "%.*e", digits, v);
        /* drop trailing zeros of the mantissa: "1.50e6" -> "1.5e6" */
        char *e = strchr(buf, 'e'), *d = e;
        while (d > buf && d[-1] == '0' && strchr(buf, '.') && strchr(buf, '.') < d) d--;
        if (d > buf && d[-1] == '.') d--;
        memmove(d, e, strlen(e) + 1);
        tidy_exponent(buf);
        return;
    }
    int dec = (int)-floor(log10(step) + 1e-9);
    snprintf(buf, n, "%.*f", dec < 0 ? 0 : dec, v);
}

/* Formats a value compactly with 3 significant digits (heatmap cells). */
static void fmt_value(char *buf, size_t n, double v) {
    snprintf(buf, n, "%.3g", v);
    tidy_exponent(buf);
}

/* The 1-2-5 step nearest to span / target. */
static double nice_step(double span, int target) {
    double raw = span / (target < 1 ? 1 : target);
    double mag = pow(10, floor(log10(raw)));
    double f = raw / mag;
    return (f < 1.5 ? 1 : f < 3 ? 2 : f < 7 ? 5 : 10) * mag;
}

typedef struct {
    int log;       /* 0: linear; 10 or 2: logarithmic in that base */
    double lo, hi; /* view range, in axis units (log_base of the value on log axes) */
    double p0, p1; /* pixel coordinates of lo and hi */
} axis;

typedef struct {
    double u;       /* axis units */
    int major;      /* 1: long tick, grid line, maybe a label */
    char label[24]; /* "" when unlabelled */
} tick;

#define MAX_TICKS 256

/* Axis units of value v, or NaN where v cannot be drawn (NaN, infinite, <= 0 on a log axis). */
static double axis_unit(const axis *a, double v) {
    if (!isfinite(v) || fabs(v) > 1e300) return NAN; /* beyond 1e300 spans would overflow */
    if (!a->log) return v;
    if (v <= 0) return NAN;
    return a->log == 2 ? log2(v) : log10(v);
}

static double axis_pixel(const axis *a, double u) {
    return a->p0 + (u - a->lo) / (a->hi - a->lo) * (a->p1 - a->p0);
}

/* Sets the view range from the data extent [lo, hi] (axis units), with a margin on each side. */
static void axis_fit(axis *a, double lo, double hi) {
    if (!(lo <= hi)) { /* no data: 0..1, or 1..b on a log axis */
        lo = 0;
        hi = 1;
    } else if (hi - lo < 1e-12 * fmax(1, fabs(lo))) {
        double pad = a->log ? 0.5 : fmax(fabs(lo) * 0.1, 0.5);
        lo -= pad;
        hi += pad;
    }
    double m = (hi - lo) * 0.04;
    a->lo = lo - m;
    a->hi = hi + m;
}

/* Label of b^e on a log axis: plain numbers near 1, 1e6 style beyond (base 10); 1K, 2M style
 * binary multiples beyond 512 (base 2). */
static void fmt_power(char *buf, size_t n, int base, int e) {
    if (base == 10) {
        if (e >= 0 && e <= 5)
            snprintf(buf, n, "%.0f", pow(10, e));
        else if (e < 0 && e >= -4)
            snprintf(buf, n, "%.*f", -e, pow(10, e));
        else
            snprintf(buf, n, "1e%d", e);
        return;
    }
    static const char suffix[] = "KMGTPE";
    if (e >= 10 && e < 70)
        snprintf(buf, n, "%d%c", 1 << (e % 10), suffix[e / 10 - 1]);
    else if (e >= 0 && e < 10)
        snprintf(buf, n, "%d", 1 << e);
    else if (e < 0 && e >= -4)
        snprintf(buf, n, "%g", ldexp(1, e));
    else
        snprintf(buf, n, "2^%d", e);
}

/* Places ticks on the axis, about target labelled ones (at least 3); returns the count written. */
static int axis_ticks(const axis *a, int target, tick *t) {
    int n = 0;
    if (target < 3) target = 3;
    if (a->log) {
        int e0 = (int)ceil(a->lo - 1e-9), e1 = (int)floor(a->hi + 1e-9);
        if (e1 - e0 + 1 >= 2) {
            /* label every k-th power, k from a list that lands labels on round powers
             * (1K, 1M, 1G in base 2; 1, 1e3, 1e6 in base 10 when k = 3) */
            static const int steps2[] = {1, 2, 5, 10, 20, 50}, steps10[] = {1, 2, 3, 5, 10, 20, 50};
            const int *steps = a->log == 2 ? steps2 : steps10;
            int nsteps = a->log == 2 ? 6 : 7, every = steps[nsteps - 1];
            for (int i = nsteps - 1; i >= 0; i--)
                if ((e1 - e0) / steps[i] + 1 <= (target < 2 ? 2 : target)) every = steps[i];
            int tick_every = (e1 - e0 + 1) > MAX_TICKS / 2 ? every : 1;
            for (int e = e0; e <= e1 && n < MAX_TICKS; e++) {
                if (e % tick_every) continue;
                tick *k = &t[n++];
                k->u = e;
                k->major = 1;
                k->label[0] = 0;
                if (((e % every) + every) % every == 0)
                    fmt_power(k->label, sizeof k->label, a->log, e);
            }
            /* minor ticks at 2..9 x 10^e where decades are few enough to show them */
            if (a->log == 10 && e1 - e0 < 12)
                for (int e = e0 - 1; e <= e1; e++)
                    for (int m = 2; m <= 9 && n < MAX_TICKS; m++) {
                        double u = e + log10(m);
                        if (u < a->lo || u > a->hi) continue;
                        t[n].u = u;
                        t[n].major = 0;
                        t[n++].label[0] = 0;
                    }
            return n;
        }
        /* less than two powers in view: 1-2-5 ticks on the values themselves */
        double vlo = a->log == 2 ? exp2(a->lo) : pow(10, a->lo);
        double vhi = a->log == 2 ? exp2(a->hi) : pow(10, a->hi);
        double step = nice_step(vhi - vlo, target);
        for (double k = ceil(vlo / step); k * step <= vhi && n < MAX_TICKS; k++) {
            double v = k * step;
            if (v <= 0) continue;
            t[n].u = axis_unit(a, v);
            t[n].major = 1;
            fmt_tick(t[n].label, sizeof t[n].label, v, step);
            n++;
        }
        return n;
    }
    double step = nice_step(a->hi - a->lo, target);
    for (double k = ceil(a->lo / step); k * step <= a->hi && n < MAX_TICKS; k++) {
        t[n].u = k * step;
        t[n].major = 1;
        fmt_tick(t[n].label, sizeof t[n].label, k * step, step);
        n++;
    }
    return n;
}

/* Drops labels (keeping the ticks) that would sit closer than need_px to the previous label. */
static void thin_labels(const axis *a, tick *t, int n, int need_px) {
    double prev = NAN;
    for (int i = 0; i < n; i++) {
        if (!t[i].label[0]) continue;
        double p = axis_pixel(a, t[i].u);
        if (!isnan(prev) && fabs(p - prev) < need_px)
            t[i].label[0] = 0;
        else
            prev = p;
    }
}

/* ---------------------------------------------------------------------------------------------- */
/* Line charts */

#define MARKER_MAX_POINTS 40 /* series this short get a dot on each point */

/* Checks the size options; fills the defaults. */
static int check_size(const char *path, int *w, int *h) {
    if (*w == 0 && *h == 0) *w = 960, *h = 600;
    if (*w < 200 || *h < 150 || *w > 8192 || *h > 8192)
        return zy_fail("%s: plot size %dx%d out of range (200x150 to 8192x8192)", path, *w, *h);
    return ZY_OK;
}

/* Counts how much ink of the layer sum lies in the rectangle (legend placement). */
static double ink_in(const float *ink, int w, int x0, int y0, int x1, int y1) {
    double s = 0;
    for (int y = y0; y < y1; y++)
        for (int x = x0; x < x1; x++) s += ink[(size_t)y * w + x];
    return s;
}

int plot_lines_png(const char *path, const zy_plot_opts *opts, const zy_series *series, int ns) {
    return plot_lines_marked_png(path, opts, series, ns, NULL, 0);
}

int plot_lines_marked_png(const char *path, const zy_plot_opts *opts, const zy_series *series,
                          int ns, const double *marks_x, int n_marks) {
    zy_plot_opts o = {0};
    if (opts) o = *opts;
    if (!path) return zy_fail("plot: no output path");
    if (ns < 0 || (ns > 0 && !series)) return zy_fail("%s: %d series given without data", path, ns);
    for (int s = 0; s < ns; s++)
        if (series[s].n < 0 || (series[s].n > 0 && (!series[s].x || !series[s].y)))
            return zy_fail("%s: series %d has n=%d but no x or y array", path, s, series[s].n);
    if (o.log_x != 0 && o.log_x != 1 && o.log_x != 2 && o.log_x != 10)
        return zy_fail("%s: log_x must be 0, 1 (base 10) or 2, found %d", path, o.log_x);
    if (o.log_y != 0 && o.log_y != 1 && o.log_y != 2 && o.log_y != 10)
        return zy_fail("%s: log_y must be 0, 1 (base 10) or 2, found %d", path, o.log_y);
    int W = o.width, H = o.height;
    ZY_TRY(check_size(path, &W, &H));

    axis ax = {.log = o.log_x == 2 ? 2 : o.log_x ? 10 : 0};
    axis ay = {.log = o.log_y == 2 ? 2 : o.log_y ? 10 : 0};
    double xlo = INFINITY, xhi = -INFINITY, ylo = INFINITY, yhi = -INFINITY;
    for (int s = 0; s < ns; s++)
        for (int i = 0; i < series[s].n; i++) {
            double u = axis_unit(&ax, series[s].x[i]), v = axis_unit(&ay, series[s].y[i]);
            if (isnan(u) || isnan(v)) continue;
            xlo = fmin(xlo, u), xhi = fmax(xhi, u), ylo = fmin(ylo, v), yhi = fmax(yhi, v);
        }
    axis_fit(&ax, xlo, xhi);
    axis_fit(&ay, ylo, yhi);

    /* vertical layout first: it fixes the y ticks, whose label widths set the left margin */
    int th = CAP_H * TEXT_SCALE;
    int top = o.title && *o.title ? 20 + th + 18 : 24;
    int bottom = 8 + 8 + th + 14 + (o.xlabel && *o.xlabel ? th + 14 : 0);
    ay.p0 = H - bottom, ay.p1 = top;
    tick *ytk = zy_malloc(sizeof(tick) * MAX_TICKS), *xtk = zy_malloc(sizeof(tick) * MAX_TICKS);
    int nyt = axis_ticks(&ay, (H - top - bottom) / 60, ytk);
    int ylw = 0;
    for (int i = 0; i < nyt; i++) ylw = fmax(ylw, text_width(ytk[i].label, TEXT_SCALE));
    int left = 14 + (o.ylabel && *o.ylabel ? th + 14 : 0) + ylw + 8 + 6;
    int right = 28, nxt = 0;
    for (int pass = 0; pass < 2; pass++) { /* again if the last label sticks out on the right */
        ax.p0 = left, ax.p1 = W - right;
        nxt = axis_ticks(&ax, (W - left - right) / 100, xtk);
        int xlw = 0;
        for (int i = 0; i < nxt; i++) xlw = fmax(xlw, text_width(xtk[i].label, TEXT_SCALE));
        thin_labels(&ax, xtk, nxt, xlw + 16);
        int over = 0;
        for (int i = 0; i < nxt; i++)
            if (xtk[i].label[0])
                over = fmax(over, axis_pixel(&ax, xtk[i].u) +
                                      text_width(xtk[i].label, TEXT_SCALE) / 2.0 + 8 - W);
        if (over <= 0) break;
        right += over;
    }
    thin_labels(&ay, ytk, nyt, th + 10);
    int px0 = left, px1 = W - right, py0 = top,
        py1 = H - bottom; /* plot area [px0,px1)x[py0,py1) */
    if (px1 - px0 < 40 || py1 - py0 < 40) {
        free(ytk), free(xtk);
        return zy_fail("%s: plot size %dx%d leaves no room for the data", path, W, H);
    }

    canvas c;
    canvas_init(&c, W, H);
    /* grid: minor lines first so major ones cover them */
    for (int pass = 0; pass < 2; pass++) {
        for (int i = 0; i < nxt; i++) {
            if (xtk[i].major != pass) continue;
            int x = (int)floor(axis_pixel(&ax, xtk[i].u));
            fill_rect(&c, x, py0, x + 1, py1, pass ? GRID : GRID_MINOR, 1);
        }
        for (int i = 0; i < nyt; i++) {
            if (ytk[i].major != pass) continue;
            int y = (int)floor(axis_pixel(&ay, ytk[i].u));
            fill_rect(&c, px0, y, px1, y + 1, pass ? GRID : GRID_MINOR, 1);
        }
    }

    /* marks: dashed vertical lines under the series (where a training phase starts) */
    for (int i = 0; i < n_marks; i++) {
        const double u = axis_unit(&ax, marks_x[i]);
        if (isnan(u)) continue;
        const int x = (int)floor(axis_pixel(&ax, u));
        if (x <= px0 || x >= px1 - 1) continue;
        for (int y = py0; y < py1; y += 8)
            fill_rect(&c, x, y, x + 2, y + 5 < py1 ? y + 5 : py1, MARK, 1);
    }

    /* series: each through a coverage layer, summed into ink for legend placement */
    layer l = {W, H, px0 + 1, py0 + 1, px1 - 1, py1 - 1, zy_calloc((size_t)W * H, sizeof(float))};
    float *ink = zy_calloc((size_t)W * H, sizeof(float));
    for (int s = 0; s < ns; s++) {
        const zy_series *sr = &series[s];
        int valid = 0;
        for (int i = 0; i < sr->n; i++)
            valid += !isnan(axis_unit(&ax, sr->x[i])) && !isnan(axis_unit(&ay, sr->y[i]));
        double hw = 1.1, lx = NAN, ly = NAN;
        int run = 0; /* points in the current unbroken run */
        for (int i = 0; i < sr->n; i++) {
            double u = axis_unit(&ax, sr->x[i]), v = axis_unit(&ay, sr->y[i]);
            if (isnan(u) || isnan(v)) {
                if (run == 1) layer_segment(&l, lx, ly, lx, ly, hw + 0.6); /* isolated point */
                run = 0;
                continue;
            }
            double X = axis_pixel(&ax, u), Y = axis_pixel(&ay, v);
            if (run > 0) layer_segment(&l, lx, ly, X, Y, hw);
            if (valid <= MARKER_MAX_POINTS) layer_segment(&l, X, Y, X, Y, 3.0);
            lx = X, ly = Y;
            run++;
        }
        if (run == 1) layer_segment(&l, lx, ly, lx, ly, hw + 0.6);
        for (int y = l.y0; y < l.y1; y++)
            for (int x = l.x0; x < l.x1; x++) ink[(size_t)y * W + x] += l.a[(size_t)y * W + x];
        layer_paint(&l, &c, PALETTE[s % 10]);
    }

    /* frame, ticks and tick labels */
    stroke_rect(&c, px0, py0, px1, py1, FRAME);
    for (int i = 0; i < nxt; i++) {
        int x = (int)floor(axis_pixel(&ax, xtk[i].u)), len = xtk[i].major ? 6 : 3;
        fill_rect(&c, x, py1, x + 1, py1 + len, FRAME, 1);
        if (xtk[i].label[0])
            draw_text(&c, x, py1 + 8 + 4, xtk[i].label, TEXT_SCALE, INK, AL_CENTER, AL_START);
    }
    for (int i = 0; i < nyt; i++) {
        int y = (int)floor(axis_pixel(&ay, ytk[i].u)), len = ytk[i].major ? 6 : 3;
        fill_rect(&c, px0 - len, y, px0, y + 1, FRAME, 1);
        if (ytk[i].label[0])
            draw_text(&c, px0 - 8 - 4, y, ytk[i].label, TEXT_SCALE, INK, AL_END, AL_CENTER);
    }
    if (o.title && *o.title) draw_title(&c, (px0 + px1) / 2, 20, o.title);
    if (o.xlabel && *o.xlabel)
        draw_text(&c, (px0 + px1) / 2, H - 14 - th, o.xlabel, TEXT_SCALE, BLACK, AL_CENTER,
                  AL_START);
    if (o.ylabel && *o.ylabel) draw_text_up(&c, 14, (py0 + py1) / 2, o.ylabel, TEXT_SCALE, BLACK);

    /* legend in the corner of the plot area that hides the least ink */
    int nl = 0, lw = 0;
    for (int s = 0; s < ns; s++)
        if (series[s].label && *series[s].label)
            nl++, lw = fmax(lw, text_width(series[s].label, TEXT_SCALE));
    if (nl > 0) {
        int row = th + 10, bw = 10 + 30 + 8 + lw + 12, bh = 8 + nl * row;
        int inset = 10, best = 0;
        double best_ink = INFINITY;
        int cx[4] = {px1 - inset - bw, px0 + inset, px1 - inset - bw, px0 + inset};
        int cy[4] = {py0 + inset, py0 + inset, py1 - inset - bh, py1 - inset - bh};
        for (int k = 0; k < 4; k++) {
            int x0 = cx[k] < 0 ? 0 : cx[k], y0 = cy[k] < 0 ? 0 : cy[k];
            double s = ink_in(ink, W, x0, y0, fmin(W, x0 + bw), fmin(H, y0 + bh));
            if (s < best_ink * 0.8) best_ink = s, best = k; /* earlier corners win near-ties */
        }
        int bx = cx[best], by = cy[best];
        fill_rect(&c, bx, by, bx + bw, by + bh, WHITE, 0.88);
        stroke_rect(&c, bx, by, bx + bw, by + bh, (rgb){200, 200, 200});
        int k = 0;
        for (int s = 0; s < ns; s++) {
            if (!series[s].label || !*series[s].label) continue;
            double yc = by + 4 + k * row + row / 2.0;
            layer ll = {W, H, 0, 0, W, H, l.a};
            layer_segment(&ll, bx + 10, yc, bx + 40, yc, 1.4);
            int valid = 0;
            for (int i = 0; i < series[s].n; i++)
                valid += !isnan(axis_unit(&ax, series[s].x[i])) &&
                         !isnan(axis_unit(&ay, series[s].y[i]));
            if (valid <= MARKER_MAX_POINTS) layer_segment(&ll, bx + 25, yc, bx + 25, yc, 3.0);
            layer_paint(&ll, &c, PALETTE[s % 10]);
            draw_text(&c, bx + 48, (int)lrint(yc), series[s].label, TEXT_SCALE, INK, AL_START,
                      AL_CENTER);
            k++;
        }
    }
    free(ink);
    free(l.a);
    free(ytk);
    free(xtk);
    int rc = png_write_rgb(path, c.px, c.w, c.h);
    canvas_free(&c);
    return rc;
}

/* ---------------------------------------------------------------------------------------------- */
/* Heatmaps */

/* Viridis-like perceptual scale: nine anchors (equal steps from 0 to 1) joined linearly. Dark blue
 * to yellow, rising in lightness, readable in grey and by most colour-blind readers. */
static rgb colormap(double t) {
    static const rgb anchors[9] = {{68, 1, 84},    {71, 45, 123},  {59, 82, 139},
                                   {44, 114, 142}, {33, 145, 140}, {40, 174, 128},
                                   {94, 201, 98},  {170, 220, 50}, {253, 231, 37}};
    t = t < 0 ? 0 : t > 1 ? 1 : t;
    double f = t * 8;
    int i = (int)floor(f);
    if (i >= 8) return anchors[8];
    f -= i;
    rgb a = anchors[i], b = anchors[i + 1];
    return (rgb){(uint8_t)lrint(a.r + (b.r - a.r) * f), (uint8_t)lrint(a.g + (b.g - a.g) * f),
                 (uint8_t)lrint(a.b + (b.b - a.b) * f)};
}

/* Label of row/column i: the caller's, or its index. */
static const char *axis_label(const char *const *labels, int i, char *buf, size_t n) {
    if (labels && labels[i]) return labels[i];
    snprintf(buf, n, "%d", i);
    return buf;
}

int plot_heatmap_png(const char *path, const char *title, const char *xlabel, const char *ylabel,
                     const double *values, int rows, int cols, const char *const *row_labels,
                     const char *const *col_labels) {
    if (!path) return zy_fail("plot: no output path");
    if (rows <= 0 || cols <= 0 || rows > 1000 || cols > 1000)
        return zy_fail("%s: heatmap shape %dx%d out of range (1..1000 each)", path, rows, cols);
    if (!values) return zy_fail("%s: heatmap has no values", path);
    double vmin = INFINITY, vmax = -INFINITY;
    for (int i = 0; i < rows * cols; i++)
        if (isfinite(values[i])) vmin = fmin(vmin, values[i]), vmax = fmax(vmax, values[i]);
    if (!(vmin <= vmax)) vmin = 0, vmax = 1;
    double slo = vmin, shi = vmax; /* colour scale range */
    if (shi - slo < 1e-12 * fmax(1, fabs(slo)))
        slo -= fmax(fabs(slo) * 0.1, 0.5), shi += fmax(fabs(shi) * 0.1, 0.5);

    int th = CAP_H * TEXT_SCALE;
    int cell = (int)fmin(720.0 / cols, 480.0 / rows);
    cell = cell < 6 ? 6 : cell > 72 ? 72 : cell;
    int gw = cols * cell, gh = rows * cell;
    char buf[32];

    /* row labels: full size if the rows are tall enough, else small, thinned to fit */
    int rs = cell >= th + 4 ? TEXT_SCALE : 1, rstep = 1;
    while (rstep * cell < CAP_H * rs + 3) rstep++;
    int rlw = 0;
    for (int r = 0; r < rows; r += rstep)
        rlw = fmax(rlw, text_width(axis_label(row_labels, r, buf, sizeof buf), rs));
    /* column labels: horizontal when they fit in a cell, else reading upwards */
    int cs = cell >= th + 4 ? TEXT_SCALE : 1, cstep = 1, clw = 0;
    for (int k = 0; k < cols; k++)
        clw = fmax(clw, text_width(axis_label(col_labels, k, buf, sizeof buf), cs));
    int vertical = clw + 6 > cell;
    if (vertical)
        while (cstep * cell < CAP_H * cs + 3) cstep++;
    int clh = vertical ? clw : CAP_H * cs;

    int top = title && *title ? 20 + th + 18 : 20;
    int left = 14 + (ylabel && *ylabel ? th + 14 : 0) + rlw + 8;
    int cbh = gh < 160 ? 160 : gh, cbw = 18;
    int cbx = left + gw + 24;
    axis cb = {.lo = slo, .hi = shi, .p0 = top + cbh, .p1 = top};
    tick *ct = zy_malloc(sizeof(tick) * MAX_TICKS);
    int nct = axis_ticks(&cb, cbh / 40, ct);
    int ctw = 0;
    for (int i = 0; i < nct; i++) ctw = fmax(ctw, text_width(ct[i].label, TEXT_SCALE));
    int W = cbx + cbw + 6 + 6 + ctw + 20;
    if (title && *title && W < text_width(title, TEXT_SCALE) + 40)
        W = text_width(title, TEXT_SCALE) + 40;
    int body = gh + 8 + clh + 12 + (xlabel && *xlabel ? th + 14 : 0);
    int H = top + (body > cbh ? body : cbh) + 16;

    canvas c;
    canvas_init(&c, W, H);
    /* values written in the cells, at one size for all, when every one of them fits */
    int vw = 0;
    for (int i = 0; i < rows * cols; i++)
        if (isfinite(values[i])) {
            fmt_value(buf, sizeof buf, values[i]);
            vw = fmax(vw, text_width(buf, 1));
        }
    int ann = cell >= th + 8 && 2 * vw + 8 <= cell ? 2 : cell >= 16 && vw + 4 <= cell ? 1 : 0;
    int gap = cell >= 12; /* a white hairline between cells when they are big enough */
    for (int r = 0; r < rows; r++)
        for (int k = 0; k < cols; k++) {
            double v = values[(size_t)r * cols + k];
            if (!isfinite(v)) continue; /* NaN: left blank */
            int x0 = left + k * cell, y0 = top + r * cell;
            rgb col = colormap((v - slo) / (shi - slo));
            fill_rect(&c, x0, y0, x0 + cell - gap, y0 + cell - gap, col, 1);
            if (!ann) continue;
            fmt_value(buf, sizeof buf, v);
            double lum = 0.2126 * col.r + 0.7152 * col.g + 0.0722 * col.b;
            draw_text(&c, x0 + (cell - gap) / 2, y0 + (cell - gap) / 2, buf, ann,
                      lum < 120 ? WHITE : BLACK, AL_CENTER, AL_CENTER);
        }
    for (int r = 0; r < rows; r += rstep)
        draw_text(&c, left - 8, top + r * cell + cell / 2,
                  axis_label(row_labels, r, buf, sizeof buf), rs, INK, AL_END, AL_CENTER);
    for (int k = 0; k < cols; k += cstep) {
        const char *s = axis_label(col_labels, k, buf, sizeof buf);
        int x = left + k * cell + cell / 2;
        if (vertical)
            draw_text_at(&c, x - CAP_H * cs / 2, top + gh + 8 + text_width(s, cs), s, cs, INK, 1);
        else
            draw_text(&c, x, top + gh + 8, s, cs, INK, AL_CENTER, AL_START);
    }
    if (title && *title) draw_title(&c, left + gw / 2, 20, title);
    if (xlabel && *xlabel)
        draw_text(&c, left + gw / 2, top + gh + 8 + clh + 12, xlabel, TEXT_SCALE, BLACK, AL_CENTER,
                  AL_START);
    if (ylabel && *ylabel) draw_text_up(&c, 14, top + gh / 2, ylabel, TEXT_SCALE, BLACK);

    /* colour bar: one colour per pixel row, ticks at 1-2-5 values */
    for (int y = 0; y < cbh; y++) {
        rgb col = colormap(1.0 - (y + 0.5) / cbh);
        fill_rect(&c, cbx, top + y, cbx + cbw, top + y + 1, col, 1);
    }
    stroke_rect(&c, cbx - 1, top - 1, cbx + cbw + 1, top + cbh + 1, FRAME);
    for (int i = 0; i < nct; i++) {
        int y = (int)floor(axis_pixel(&cb, ct[i].u));
        fill_rect(&c, cbx + cbw + 1, y, cbx + cbw + 6, y + 1, FRAME, 1);
        draw_text(&c, cbx + cbw + 6 + 6, y, ct[i].label, TEXT_SCALE, INK, AL_START, AL_CENTER);
    }
    free(ct);
    int rc = png_write_rgb(path, c.px, c.w, c.h);
    canvas_free(&c);
    return rc;
}
