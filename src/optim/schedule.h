/* Learning-rate schedules as pure functions of the step: warmup + cosine, and warmup-stable-decay
 * (WSD). `step` counts optimiser steps from 0 (the lr for the step about to be taken). Warmup is
 * linear from lr/warmup at step 0 to lr at step warmup-1. Cosine and WSD reach min_lr_ratio * lr at
 * step total_steps and stay there beyond it; constant stays at lr. */
#ifndef ZY_SCHEDULE_H
#define ZY_SCHEDULE_H

#include <stdint.h>

typedef enum {
    ZY_SCHED_CONSTANT = 0, /* warmup, then lr */
    ZY_SCHED_COSINE = 1,   /* warmup, then cosine from lr to min_lr_ratio * lr at total_steps */
    ZY_SCHED_WSD = 2,      /* warmup, constant lr, then decay over the last decay_frac of steps */
} zy_sched_kind;

typedef enum {
    ZY_DECAY_LINEAR = 0, /* factor 1 - x over the decay phase, x in [0, 1] */
    ZY_DECAY_SQRT = 1,   /* factor 1 - sqrt(x) ("1-sqrt" cooldown) */
} zy_decay_shape;

typedef struct {
    zy_sched_kind kind;
    float lr;             /* peak learning rate */
    int64_t warmup_steps; /* 0 = no warmup */
    int64_t total_steps;  /* > 0 */
    float min_lr_ratio;   /* final lr / peak lr, in [0, 1] */
    float decay_frac;     /* WSD: fraction of total_steps spent decaying, in [0, 1] */
    zy_decay_shape decay; /* WSD decay shape */
} zy_schedule;

/* Fills the defaults for a run of total_steps: cosine, lr 3e-4, warmup min(100, total/10),
 * min_lr_ratio 0.1, decay_frac 0.2, linear decay. */
void schedule_default(zy_schedule *s, int64_t total_steps);
/* Checks the fields; an error names the field, the allowed range and the value found. */
int schedule_check(const zy_schedule *s);
/* The learning rate for (0-based) step; pure. */
float schedule_lr(const zy_schedule *s, int64_t step);

#endif
