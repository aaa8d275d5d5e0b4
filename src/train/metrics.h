/* Training metrics: named scalars per step, written to a JSONL file (one object per step) and to a
 * TensorBoard event file in the same folder; plus the console progress line and the loss-curve
 * plot. A resumed run appends to the JSONL and starts a new event file, as TensorBoard expects. */
#ifndef ZY_METRICS_H
#define ZY_METRICS_H

#include <stddef.h>
#include <stdint.h>

typedef struct zy_metrics zy_metrics;

/* Opens (creating dir and its parents) dir/metrics.jsonl for appending and a new event file
 * dir/events.out.tfevents.<unix time>.<host>.<pid>.<n>; *m is NULL on failure. */
int metrics_open(zy_metrics **m, const char *dir);
/* Records tag = value at step. Scalars of one step are gathered and written as one JSONL line and
 * one event when the step changes, on metrics_flush or on metrics_close; a tag given twice in a
 * step keeps its last value. NaN and infinities are written as JSON null (TensorBoard keeps them).
 */
int metrics_scalar(zy_metrics *m, const char *tag, int64_t step, double value);
/* Writes the gathered step (if any) and flushes both files to the operating system. */
int metrics_flush(zy_metrics *m);
/* Flushes, fsyncs and closes both files and frees m (NULL is a no-op); reports a failed write. */
int metrics_close(zy_metrics *m);
/* Path of the JSONL file and of the event file this sink writes. */
const char *metrics_jsonl_path(const zy_metrics *m);
const char *metrics_events_path(const zy_metrics *m);

/* Renders "step 120/2000 | loss 3.214 | 41.2k tok/s | 2m03s elapsed | ETA 31m10s" into buf (size
 * n). The ETA assumes the steps done so far (step) took elapsed_s; unknown parts print as "--".
 * Returns the length snprintf would give. */
int progress_line(char *buf, size_t n, int64_t step, int64_t total_steps, double loss,
                  double tokens_per_s, double elapsed_s);

/* Reads a metrics JSONL file and plots "loss" (train) and "val_loss" against "step" as a PNG. When
 * a step repeats an earlier one (a resumed run), the points from that step on are replaced. Where
 * the "phase" of consecutive steps differs (a multi-phase run), a dashed vertical line marks the
 * boundary. */
int metrics_plot_loss(const char *jsonl_path, const char *png_path);

/* CRC-32C (Castagnoli), as TFRecord framing uses it, and its masked form
 * ((crc >> 15 | crc << 17) + 0xa282ead8). Exposed for tests. */
uint32_t metrics_crc32c(const void *data, size_t n);
uint32_t metrics_crc32c_masked(const void *data, size_t n);

#endif
