/* See spike.h. */
#include "train/spike.h"
#include "base/err.h"

#include <math.h>
#include <stdio.h>

void spike_init(zy_spike *s, const zy_spike_config *cfg) {
    s->cfg = *cfg;
    s->mean = 0;
    s->seen = 0;
}

int spike_check(zy_spike *s, double loss, char *why, size_t n) {
    if (!isfinite(loss)) return 0; /* the non-finite check's to report; it never joins the mean */
    const double threshold = (double)s->cfg.factor * s->mean;
    if (s->cfg.factor > 0 && s->seen >= s->cfg.warmup && s->seen > 0 && loss > threshold) {
        snprintf(why, n, "loss spike: loss %.6g > %g x running mean %.6g (threshold %.6g)", loss,
                 (double)s->cfg.factor, s->mean, threshold);
        return 1;
    }
    const double d = s->cfg.decay;
    s->mean = s->seen == 0 ? loss : d * s->mean + (1 - d) * loss;
    s->seen++;
    return 0;
}

void spike_save(const zy_spike *s, cJSON *state) {
    cJSON *o = cJSON_AddObjectToObject(state, "loss_spike");
    cJSON_AddNumberToObject(o, "mean", s->mean); /* cJSON writes a double that reads back exact */
    cJSON_AddNumberToObject(o, "steps", (double)s->seen);
}

int spike_resume(zy_spike *s, const cJSON *state, const char *path) {
    const cJSON *o = cJSON_GetObjectItemCaseSensitive(state, "loss_spike");
    if (!o) {
        if (s->cfg.factor > 0)
            printf("resume: %s has no loss-spike mean (an older checkpoint): the detector warms "
                   "up again\n",
                   path);
        s->mean = 0;
        s->seen = 0;
        return ZY_OK;
    }
    const cJSON *mean = cJSON_GetObjectItemCaseSensitive(o, "mean");
    const cJSON *steps = cJSON_GetObjectItemCaseSensitive(o, "steps");
    if (!cJSON_IsNumber(mean) || !isfinite(mean->valuedouble) || !cJSON_IsNumber(steps) ||
        !(steps->valuedouble >= 0 && steps->valuedouble < 9007199254740992.0) ||
        steps->valuedouble != floor(steps->valuedouble))
        return zy_fail("%s: \"loss_spike\" should be {\"mean\": a finite number, \"steps\": a "
                       "count}",
                       path);
    s->mean = mean->valuedouble;
    s->seen = (int64_t)steps->valuedouble;
    return ZY_OK;
}
