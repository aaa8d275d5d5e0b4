/* Training configuration from JSON + overrides (see train_config.h): the settings table reads the
 * keys (train/settings.h); this file merges the sources and checks the fields together. */
#include "train/train_config.h"
#include "base/err.h"
#include "base/fileio.h"
#include "train/settings.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void train_config_defaults(zy_train_config *c) {
    memset(c, 0, sizeof *c);
    /* the module defaults fill the fields the table does not name (decay_kinds, balance eps) */
    optim_config_default(&c->optim);
    balance_config_default(&c->balance);
    schedule_default(&c->schedule, 1);
    settings_defaults(c);
    c->schedule.lr = c->optim.lr;
    c->schedule.total_steps = c->steps;
}

/* A warmup longer than the steps it warms is shortened to them: a short run (a smoke test, --steps
 * 1) keeps the default warmup usable. */
static void clamp_warmup(zy_schedule *s, const char *source, const char *what) {
    if (s->warmup_steps <= s->total_steps) return;
    fprintf(stderr,
            "warning: %s: %s = %lld is longer than the run (steps = %lld); warming up over all "
            "%lld steps\n",
            source, what, (long long)s->warmup_steps, (long long)s->total_steps,
            (long long)s->total_steps);
    s->warmup_steps = s->total_steps;
}

/* Each phase's values: what it left out carries on from the phase before (the first from the
 * top-level keys and the model's RoPE bases); a length in tokens becomes whole steps (rounded up);
 * the run's steps are the phases' sum (a "steps" the config gives must be that sum). */
static int resolve_phases(zy_train_config *c, const char *source, int steps_given) {
    const zy_config *m = &c->model;
    int64_t total = 0;
    for (int i = 0; i < c->n_phases; i++) {
        zy_phase *p = &c->phases[i];
        const zy_phase *prev = i > 0 ? &c->phases[i - 1] : NULL;
        if (!(p->given & ZY_PHASE_HAS_BATCH))
            p->batch_size = prev ? prev->batch_size : c->batch_size;
        if (!(p->given & ZY_PHASE_HAS_SEQ)) p->seq_len = prev ? prev->seq_len : c->seq_len;
        if (!(p->given & ZY_PHASE_HAS_DATA)) {
            p->n_sources = prev ? prev->n_sources : c->n_sources;
            memcpy(p->sources, prev ? prev->sources : c->sources, sizeof p->sources);
        }
        for (int t = 0; t < 2; t++)
            if (!(p->given & (t ? ZY_PHASE_HAS_THETA_SLIDING : ZY_PHASE_HAS_THETA)))
                p->rope_theta[t] = prev ? prev->rope_theta[t] : m->rope[t].theta;
        if (p->seq_len > m->max_position_embeddings)
            return zy_fail("%s: phases[%d].seq_len = %d exceeds the model's "
                           "max_position_embeddings %d",
                           source, i, p->seq_len, m->max_position_embeddings);
        if (p->n_sources == 0)
            return zy_fail("%s: phases[%d]: no data (give data in the phase or at the top level)",
                           source, i);
        for (int a = 0; a < p->n_sources; a++) /* a source's position is kept by its path */
            for (int b = a + 1; b < p->n_sources; b++)
                if (!strcmp(p->sources[a].path, p->sources[b].path))
                    return zy_fail("%s: phases[%d].data lists %s twice: give it once with the "
                                   "sum of the weights",
                                   source, i, p->sources[a].path);
        if (p->given & ZY_PHASE_HAS_TOKENS) {
            const int64_t per_step = (int64_t)p->batch_size * p->seq_len * c->grad_accum;
            p->steps = (p->tokens + per_step - 1) / per_step;
        }
        p->first_step = total;
        total += p->steps;
        p->schedule.lr = c->optim.lr;
        p->schedule.total_steps = p->steps;
        char what[64];
        snprintf(what, sizeof what, "phases[%d].schedule.warmup", i);
        if (p->given & ZY_PHASE_HAS_SCHEDULE) clamp_warmup(&p->schedule, source, what);
        if ((p->given & ZY_PHASE_HAS_SCHEDULE) && schedule_check(&p->schedule) != ZY_OK)
            return zy_fail_ctx("%s: phases[%d].schedule", source, i);
    }
    if (c->n_phases == 0) return ZY_OK;
    if (steps_given && c->steps != total)
        return zy_fail("%s: steps = %lld but the phases add up to %lld steps: leave steps out (the "
                       "phases set the run's length)",
                       source, (long long)c->steps, (long long)total);
    c->steps = total;
    return ZY_OK;
}

/* The fields that follow from others, then the checks that involve several fields. */
static int resolve(zy_train_config *c, const char *source, int steps_given) {
    ZY_TRY(resolve_phases(c, source, steps_given));
    c->schedule.lr = c->optim.lr;
    c->schedule.total_steps = c->steps;
    clamp_warmup(&c->schedule, source, "schedule.warmup");
    if (c->n_sources == 0)
        return zy_fail("%s: data: at least one source is required (a folder from zayac data "
                       "prepare, or a list of {\"path\", \"weight\"})",
                       source);
    if (c->seq_len > c->model.max_position_embeddings)
        return zy_fail("%s: seq_len = %d exceeds the model's max_position_embeddings %d: lower "
                       "seq_len or use a model with longer positions",
                       source, c->seq_len, c->model.max_position_embeddings);
    if (optim_config_check(&c->optim) != ZY_OK || schedule_check(&c->schedule) != ZY_OK ||
        (c->balance_enabled && balance_config_check(&c->balance) != ZY_OK))
        return zy_fail_ctx("%s", source);
    return ZY_OK;
}

/* The JSON object in the file at path (a new tree). */
static int read_root(const char *path, cJSON **out) {
    char *text;
    ZY_TRY(zy_read_file(path, &text, NULL));
    const char *end = NULL;
    cJSON *root = cJSON_ParseWithOpts(text, &end, 0);
    if (!root) {
        long at = end ? (long)(end - text) : -1;
        free(text);
        return zy_fail("%s: not valid JSON (parsing stopped at byte %ld)", path, at);
    }
    free(text);
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return zy_fail("%s: the training config must be a JSON object", path);
    }
    *out = root;
    return ZY_OK;
}

int train_config_build(zy_train_config *c, const char *path, const char *const *overrides,
                       int n_overrides, char **json_out) {
    train_config_defaults(c);
    char source[ZY_PATH_MAX + 64];
    snprintf(source, sizeof source, "%s%s", path ? path : "command line",
             path && n_overrides > 0 ? " (with --set overrides)" : "");
    cJSON *root = cJSON_CreateObject();
    if (path) {
        cJSON_Delete(root);
        ZY_TRY(read_root(path, &root));
    }
    int rc = ZY_OK;
    for (int i = 0; i < n_overrides && rc == ZY_OK; i++) rc = settings_override(root, overrides[i]);
    if (rc == ZY_OK) rc = settings_read(c, root, source);
    const int steps_given = cJSON_GetObjectItemCaseSensitive(root, "steps") != NULL;
    cJSON_Delete(root);
    if (rc == ZY_OK) rc = resolve(c, source, steps_given);
    if (rc == ZY_OK && json_out) *json_out = train_config_json(c);
    return rc;
}

char *train_config_json(const zy_train_config *c) {
    cJSON *j = settings_to_json(c);
    char *text = cJSON_Print(j);
    cJSON_Delete(j);
    ZY_CHECK(text != NULL);
    return text;
}

/* Appends "  key: old -> new" for each difference between a and b under the path prefix. */
static int diff_into(const cJSON *a, const cJSON *b, const char *prefix, char *out, size_t n) {
    int count = 0;
    if (cJSON_IsObject(a) && cJSON_IsObject(b)) {
        const cJSON *it;
        char key[512];
        cJSON_ArrayForEach(it, a) { /* keys of a (changed or gone), then keys new in b */
            snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", it->string);
            count += diff_into(it, cJSON_GetObjectItemCaseSensitive(b, it->string), key, out, n);
        }
        cJSON_ArrayForEach(it, b) {
            if (cJSON_GetObjectItemCaseSensitive(a, it->string)) continue;
            snprintf(key, sizeof key, "%s%s%s", prefix, *prefix ? "." : "", it->string);
            count += diff_into(NULL, it, key, out, n);
        }
        return count;
    }
    /* lists of objects (phases) item by item, so the message names the phase that changed */
    if (cJSON_IsArray(a) && cJSON_IsArray(b) && cJSON_GetArraySize(a) == cJSON_GetArraySize(b) &&
        cJSON_IsObject(a->child)) {
        char key[512];
        int i = 0;
        for (const cJSON *x = a->child, *y = b->child; x; x = x->next, y = y->next, i++) {
            snprintf(key, sizeof key, "%s[%d]", prefix, i);
            count += diff_into(x, y, key, out, n);
        }
        return count;
    }
    if (a && b && cJSON_Compare(a, b, 1)) return 0;
    char *ta = a ? cJSON_PrintUnformatted(a) : NULL, *tb = b ? cJSON_PrintUnformatted(b) : NULL;
    const size_t len = strlen(out);
    snprintf(out + len, n - len, "  %s: %.120s -> %.120s\n", prefix, ta ? ta : "(absent)",
             tb ? tb : "(absent)");
    free(ta);
    free(tb);
    return 1;
}

int train_config_diff(const char *old_json, const char *new_json, char *out, size_t n) {
    if (n) out[0] = 0;
    cJSON *a = cJSON_Parse(old_json), *b = cJSON_Parse(new_json);
    const int count = cJSON_IsObject(a) && cJSON_IsObject(b) ? diff_into(a, b, "", out, n) : -1;
    cJSON_Delete(a);
    cJSON_Delete(b);
    return count;
}
