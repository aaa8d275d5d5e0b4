/* Learning-rate schedules (see schedule.h). */
#include "optim/schedule.h"
#include "base/err.h"

#include <math.h>
#include <string.h>

void schedule_default(zy_schedule *s, int64_t total_steps) {
    memset(s, 0, sizeof *s);
    s->kind = ZY_SCHED_COSINE;
    s->lr = 3e-4f;
    s->total_steps = total_steps;
    s->warmup_steps = total_steps / 10 < 100 ? total_steps / 10 : 100;
    s->min_lr_ratio = 0.1f;
    s->decay_frac = 0.2f;
    s->decay = ZY_DECAY_LINEAR;
}

int schedule_check(const zy_schedule *s) {
    if (s->kind != ZY_SCHED_CONSTANT && s->kind != ZY_SCHED_COSINE && s->kind != ZY_SCHED_WSD)
        return zy_fail("schedule: kind must be constant, cosine or wsd, found %d", (int)s->kind);
    if (!(isfinite(s->lr) && s->lr >= 0))
        return zy_fail("schedule: lr must be a finite number >= 0, found %g", s->lr);
    if (s->total_steps <= 0)
        return zy_fail("schedule: total_steps must be > 0, found %lld", (long long)s->total_steps);
    if (s->warmup_steps < 0 || s->warmup_steps > s->total_steps)
        return zy_fail("schedule: warmup_steps must be in [0, total_steps = %lld], found %lld",
                       (long long)s->total_steps, (long long)s->warmup_steps);
    if (!(s->min_lr_ratio >= 0 && s->min_lr_ratio <= 1))
        return zy_fail("schedule: min_lr_ratio must be in [0, 1], found %g", s->min_lr_ratio);
    if (!(s->decay_frac >= 0 && s->decay_frac <= 1))
        return zy_fail("schedule: decay_frac must be in [0, 1], found %g", s->decay_frac);
    if (s->decay != ZY_DECAY_LINEAR && s->decay != ZY_DECAY_SQRT)
        return zy_fail("schedule: decay must be linear or sqrt, found %d", (int)s->decay);
    return ZY_OK;
}

float schedule_lr(const zy_schedule *s, int64_t step) {
    const double peak = s->lr, floor_lr = peak * s->min_lr_ratio;
    const int64_t total = s->total_steps, warm = s->warmup_steps;
    if (step < 0) step = 0;
    if (step < warm) return (float)(peak * (double)(step + 1) / (double)warm);
    if (s->kind == ZY_SCHED_CONSTANT) return (float)peak;
    if (step >= total) return (float)floor_lr;
    if (s->kind == ZY_SCHED_COSINE) {
        if (total == warm) return (float)floor_lr;
        double x = (double)(step - warm) / (double)(total - warm);
        return (float)(floor_lr + (peak - floor_lr) * 0.5 * (1.0 + cos(M_PI * x)));
    }
    /* WSD: the decay phase starts decay_frac * total steps before the end, never inside warmup */
    int64_t start = total - (int64_t)llround((double)s->decay_frac * (double)total);
    if (start < warm) start = warm;
    if (step < start) return (float)peak;
    double x = (double)(step - start) / (double)(total - start);
    double f = s->decay == ZY_DECAY_SQRT ? 1.0 - sqrt(x) : 1.0 - x;
    return (float)(floor_lr + (peak - floor_lr) * f);
}
