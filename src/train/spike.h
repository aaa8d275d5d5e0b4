/* Loss-spike detection: a step whose loss is above `factor` times the running mean of the losses
 * before it fails before its update, as a non-finite loss does (train/step.h), so the supervisor
 * rolls the run back and skips the batch if the same step spikes again. The running mean is an
 * exponential moving average of every step that passed; the first `warmup` steps only feed it, so
 * the noisy start of a run never trips it. The loss is every rank's (summed over the ranks before
 * it gets here), so all ranks decide alike without a collective of their own. The mean and its
 * step count are in every checkpoint (state.json "loss_spike"), so a resumed run decides as an
 * uninterrupted one would. */
#ifndef ZY_TRAIN_SPIKE_H
#define ZY_TRAIN_SPIKE_H

#include <cjson/cJSON.h>
#include <stddef.h>
#include <stdint.h>

typedef struct {
    float factor;   /* a loss above factor x the running mean is a spike; 0 = detection off */
    int64_t warmup; /* steps whose losses only feed the mean */
    float decay;    /* the mean's decay per step: mean = decay x mean + (1 - decay) x loss */
} zy_spike_config;

typedef struct {
    zy_spike_config cfg;
    double mean;  /* the running mean of the losses of the steps that passed */
    int64_t seen; /* steps that fed it (0: no mean yet) */
} zy_spike;

void spike_init(zy_spike *s, const zy_spike_config *cfg);
/* 1 when loss is a spike (detection on, past the warmup, loss > factor x mean): the mean is left
 * as it was and why gets "loss spike: loss L > F x running mean M (threshold T)". Else 0 and the
 * loss joins the mean (also with detection off, so turning it on in a resume finds a mean). */
int spike_check(zy_spike *s, double loss, char *why, size_t n);
/* Adds "loss_spike": {"mean", "steps"} to a checkpoint's state.json object. */
void spike_save(const zy_spike *s, cJSON *state);
/* Restores the mean from state.json (path names it in errors). A checkpoint from before the
 * detector existed has none: the mean starts again (with a note when detection is on). */
int spike_resume(zy_spike *s, const cJSON *state, const char *path);

#endif
