/* zayac train: trains from a JSON training config; flags and --set override its settings. Also
 * prints the resolved config (--print-config) and the table of settings (--list-settings). */
#include "args.h"
#include "base/err.h"
#include "cmds.h"
#include "train/settings.h"
#include "train/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OVERRIDES 64

/* "key=N" for an integer option checked against the key's range in the settings table. */
static int int_override(const zy_opt *opts, const char *name, const char *key, char **out) {
    const zy_setting *s = settings_find(key);
    long long v;
    ZY_TRY(args_int_in(opts, name, 0, (long long)s->lo, (long long)s->hi, &v));
    char buf[64];
    snprintf(buf, sizeof buf, "%s=%lld", key, v);
    *out = zy_strdup(buf);
    return ZY_OK;
}

/* The --set values in order (the option table keeps only the last one of a repeated option). */
static int collect_sets(int argc, char **argv, const zy_opt *opts, const char **sets, int *n) {
    for (int i = 1; i < argc; i++) {
        const zy_opt *o = opts;
        while (o->name && strcmp(o->name, argv[i])) o++;
        if (!o->name || !o->takes_value || i + 1 == argc) continue; /* args_parse reports it */
        if (!strcmp(argv[i], "--set")) {
            if (*n == MAX_OVERRIDES) return zy_fail("at most %d --set options", MAX_OVERRIDES);
            sets[(*n)++] = argv[i + 1];
        }
        i++;
    }
    return ZY_OK;
}

/* The flags that stand for settings (--steps, --out, --device, --seed) as overrides, after the
 * --set ones so that they win. Each value is checked here, so an error names the flag. */
static int flag_overrides(const zy_opt *opts, const char **over, char **owned, int *n) {
    static const char *const flags[][2] = {
        {"--steps", "steps"}, {"--seed", "seed"}, {"--out", "out_dir"}, {"--device", "device"}};
    for (int i = 0; i < 4; i++) {
        const char *v = args_get(opts, flags[i][0]);
        if (!v) continue;
        if (*n == MAX_OVERRIDES) return zy_fail("at most %d overrides", MAX_OVERRIDES);
        char *o = NULL;
        if (i < 2) {
            ZY_TRY(int_override(opts, flags[i][0], flags[i][1], &o));
        } else {
            const zy_setting *s = settings_find(flags[i][1]);
            int k = 0;
            if (s->choices) ZY_TRY(args_choice(opts, flags[i][0], s->choices, 0, &k));
            o = settings_string_override(flags[i][1], v);
        }
        owned[*n] = o;
        over[(*n)++] = o;
    }
    return ZY_OK;
}

int cmd_train(int argc, char **argv) {
    zy_opt opts[] = {
        {"--config", 1, "training config (JSON); see configs/train-tiny.json", NULL},
        {"--set", 1, "override a setting: --set optimizer.lr=1e-3 (repeatable; --list-settings)",
         NULL},
        {"--steps", 1, "total optimiser steps", NULL},
        {"--out", 1, "output folder (checkpoints, metrics, plots)", NULL},
        {"--device", 1, "auto, cpu or cuda", NULL},
        {"--seed", 1, "seed for init, data order and sampling", NULL},
        {"--resume", 0, "continue from the newest complete checkpoint in the output folder", NULL},
        {"--overwrite", 0,
         "start afresh in an output folder that holds a run (its checkpoints are removed)", NULL},
        {"--stop-after", 1,
         "stop (with a checkpoint, exit 3) after N steps of this run; 0 saves the state as "
         "resumed (or initialised) in this run's layout without a step",
         NULL},
        {"--print-config", 0, "print the resolved config (every default) as JSON; train nothing",
         NULL},
        {"--list-settings", 0, "print the table of settings (markdown: key, type, default, ...)",
         NULL},
        {"--help", 0, "this help", NULL},
        {NULL, 0, NULL, NULL},
    };
    const char *synopsis = "[--config FILE] [--set key=value ...] [--resume] [--print-config] "
                           "[flags]";
    int rc = args_cli("train", synopsis, opts, argc, argv, NULL, 0, NULL);
    if (rc != ARGS_RUN) return rc;
    if (args_get(opts, "--list-settings")) {
        char *md = settings_markdown();
        fputs(md, stdout);
        free(md);
        return 0;
    }
    const char *over[MAX_OVERRIDES];
    char *owned[MAX_OVERRIDES] = {0};
    int n_over = 0;
    long long stop_after = -1; /* never */
    rc = collect_sets(argc, argv, opts, over, &n_over);
    const int n_sets = n_over;
    if (rc == ZY_OK) rc = flag_overrides(opts, over, owned, &n_over);
    if (rc == ZY_OK) rc = args_int_in(opts, "--stop-after", -1, 0, (long long)1e15, &stop_after);
    if (rc == ZY_OK && args_get(opts, "--resume") && args_get(opts, "--overwrite"))
        rc = zy_fail("--resume continues the run in the output folder, --overwrite starts over: "
                     "give one");
    zy_train_config *c = zy_malloc(sizeof *c);
    char *json = NULL;
    if (rc == ZY_OK) rc = train_config_build(c, args_get(opts, "--config"), over, n_over, &json);
    for (int i = n_sets; i < n_over; i++) free(owned[i]);
    if (rc == ZY_OK && args_get(opts, "--print-config")) {
        printf("%s\n", json);
    } else if (rc == ZY_OK) {
        zy_train_opts o = {.resume = args_get(opts, "--resume") != NULL,
                           .overwrite = args_get(opts, "--overwrite") != NULL,
                           .stop_after = stop_after,
                           .config_json = json};
        rc = train_run(c, &o);
    }
    free(json);
    free(c);
    if (rc == TRAIN_STOPPED) return ZY_EXIT_STOPPED; /* a checkpoint was written */
    return rc == ZY_OK ? 0 : cli_error("train");
}
