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

/* The fields that follow from others, then the checks that involve several fields. */
static int resolve(zy_train_config *c, const char *source) {
    c->schedule.lr = c->optim.lr;
    c->schedule.total_steps = c->steps;
    if (c->schedule.warmup_steps > c->steps) {
        /* a short run (a smoke test, --steps 1) keeps the default warmup usable */
        fprintf(stderr,
                "warning: %s: schedule.warmup = %lld is longer than the run (steps = %lld); "
                "warming up over all %lld steps\n",
                source, (long long)c->schedule.warmup_steps, (long long)c->steps,
                (long long)c->steps);
        c->schedule.warmup_steps = c->steps;
    }
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
    cJSON_Delete(root);
    if (rc == ZY_OK) rc = resolve(c, source);
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
