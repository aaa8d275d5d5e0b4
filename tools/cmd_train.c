/* zayac train: trains from a JSON training config; flags override its fields. */
#include "args.h"
#include "base/err.h"
#include "cmds.h"
#include "model_cli.h"
#include "train/train.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_OVERRIDES 64

int cmd_train(int argc, char **argv) {
    zy_opt opts[] = {
        {"--config", 1, "training config (JSON); see configs/train-tiny.json", NULL},
        {"--set", 1, "override a field: --set optimizer.lr=1e-3 (repeatable)", NULL},
        {"--steps", 1, "total optimiser steps", NULL},
        {"--out", 1, "output folder (checkpoints, metrics, plots)", NULL},
        {"--device", 1, "auto, cpu or cuda", NULL},
        {"--seed", 1, "seed for init, data order and sampling", NULL},
        {"--resume", 0, "continue from the newest complete checkpoint in the output folder", NULL},
        {"--stop-after", 1, "stop (with a checkpoint) after N steps of this run", NULL},
        {"--help", 0, "this help", NULL},
        {NULL, 0, NULL, NULL},
    };
    /* --set may repeat: collect them before the table parse (which keeps the last value) */
    const char *overrides[MAX_OVERRIDES];
    int n_over = 0;
    for (int i = 1; i + 1 < argc; i++)
        if (!strcmp(argv[i], "--set")) {
            if (n_over == MAX_OVERRIDES) {
                fprintf(stderr, "zayac train: at most %d --set options\n", MAX_OVERRIDES);
                return 2;
            }
            overrides[n_over++] = argv[++i];
        }
    int help = 0;
    if (args_parse(argc, argv, opts, NULL, 0, NULL) != 0 || (help = !!args_get(opts, "--help"))) {
        if (!help) cli_error("train");
        args_usage("train", "[--config FILE] [--set key=value ...] [--resume] [flags]", opts);
        return help ? 0 : 2;
    }
    static const char *const direct[][2] = {
        {"--steps", "steps"}, {"--out", "out_dir"}, {"--device", "device"}, {"--seed", "seed"}};
    char buf[4][1100];
    for (int i = 0; i < 4; i++) {
        const char *v = args_get(opts, direct[i][0]);
        if (!v) continue;
        if (!strcmp(direct[i][1], "out_dir") || !strcmp(direct[i][1], "device"))
            snprintf(buf[i], sizeof buf[i], "%s=\"%s\"", direct[i][1], v);
        else
            snprintf(buf[i], sizeof buf[i], "%s=%s", direct[i][1], v);
        if (n_over < MAX_OVERRIDES) overrides[n_over++] = buf[i];
    }
    long long stop_after;
    if (args_int(opts, "--stop-after", 0, &stop_after) != 0) return cli_error("train");
    zy_train_config *c = malloc(sizeof *c);
    char *json = NULL;
    if (train_config_build(c, args_get(opts, "--config"), overrides, n_over, &json) != 0) {
        free(c);
        return cli_error("train");
    }
    zy_train_opts o = {.resume = args_get(opts, "--resume") != NULL,
                       .stop_after = stop_after,
                       .config_json = json};
    int rc = train_run(c, &o);
    free(json);
    free(c);
    return rc == 0 ? 0 : cli_error("train");
}
