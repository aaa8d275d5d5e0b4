/* Plots written as PNG images with no outside library: line charts (loss curves, bandwidth curves)
 * and heatmaps (GEMM throughput by shape), with axes, ticks, labels and a legend drawn in a
 * built-in bitmap font. */
#ifndef ZY_PLOT_H
#define ZY_PLOT_H

typedef struct {
    const char *label; /* legend entry */
    const double *x;   /* [n] */
    const double *y;   /* [n]; NaN points are skipped */
    int n;
} zy_series;

typedef struct {
    const char *title;
    const char *xlabel;
    const char *ylabel;
    int log_x, log_y;  /* logarithmic axes (base 10; base 2 ticks when log_x == 2) */
    int width, height; /* pixels; 0 = 960 x 600 */
} zy_plot_opts;

/* Writes a line chart of ns series to path (PNG). */
int plot_lines_png(const char *path, const zy_plot_opts *opts, const zy_series *series, int ns);
/* The same with a dashed vertical line at each of marks_x[n_marks] (where a training phase starts),
 * under the series. */
int plot_lines_marked_png(const char *path, const zy_plot_opts *opts, const zy_series *series,
                          int ns, const double *marks_x, int n_marks);
/* Writes a heatmap of values[rows*cols] (row-major; NaN = blank) with a colour scale. */
int plot_heatmap_png(const char *path, const char *title, const char *xlabel, const char *ylabel,
                     const double *values, int rows, int cols, const char *const *row_labels,
                     const char *const *col_labels);

#endif
