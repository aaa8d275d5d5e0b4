/* zayac supervise: runs a training command (normally `zayac launch -n N -- zayac train ...`) and
 * keeps it going through crashes, hangs and divergence, restarting it with --resume; every
 * incident goes to DIR/incidents.jsonl, the account to DIR/summary.json (src/super/supervise.h). */
#include "args.h"
#include "base/err.h"
#include "cmds.h"
#include "super/supervise.h"

#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>

static const char *synopsis =
    "zayac supervise [--out DIR] [--max-restarts K] [--hang-timeout S] [--backoff S]\n"
    "                [--rank-failure-window S] -- CMD...\n"
    "Runs CMD and keeps it going: exit 0 ends it, exit 2 (bad input) stops it, a crash, a signal,\n"
    "exit 1, a hang or a divergence restarts it with --resume from the newest checkpoint that\n"
    "verifies. SIGTERM/SIGINT go to the run (which saves and exits 3); then the supervisor exits "
    "3.";

static volatile sig_atomic_t stop_signal = 0;

static void on_signal(int sig) {
    stop_signal = sig;
}

/* The training command's --out (its last), where the incident log belongs by default. */
static const char *command_out(char **cmd) {
    const char *out = NULL;
    for (int i = 0; cmd[i]; i++)
        if (!strcmp(cmd[i], "--out") && cmd[i + 1]) out = cmd[i + 1];
    return out;
}

int cmd_supervise(int argc, char **argv) {
    zy_opt opts[] = {
        {"--out", 1, "folder of incidents.jsonl and summary.json (default: CMD's --out, else .)",
         NULL},
        {"--max-restarts", 1,
         "restarts in a row that get no further than the furthest failure so far, before giving "
         "up with exit 1 (default 10; a run that moves past each failure goes on)",
         NULL},
        {"--hang-timeout", 1,
         "seconds without a new step that mean the run hung (default 600; 0: not watched; "
         "before a run's first step: at least 120)",
         NULL},
        {"--backoff", 1,
         "seconds before a restart, doubled after each restart that made no progress (default 5)",
         NULL},
        {"--rank-failure-window", 1,
         "seconds within which the same rank failing again counts as repeated: the run goes on "
         "with fewer ranks (default 3600)",
         NULL},
        {"--help", 0, "this help", NULL},
        {NULL, 0, NULL, NULL},
    };
    int dashes = 1;
    while (dashes < argc && strcmp(argv[dashes], "--")) dashes++;
    const int rc = args_cli("supervise", synopsis, opts, dashes, argv, NULL, 0, NULL);
    if (rc != ARGS_RUN) return rc;
    if (dashes + 1 >= argc) {
        zy_fail("no command to supervise: zayac supervise [options] -- CMD...");
        return args_usage_error("supervise", synopsis, opts);
    }
    char **cmd = argv + dashes + 1;
    long long restarts;
    double hang, backoff, window;
    if (args_int_in(opts, "--max-restarts", 10, 0, 100000, &restarts) != ZY_OK ||
        args_double_in(opts, "--hang-timeout", 600, "[0, inf)", &hang) != ZY_OK ||
        args_double_in(opts, "--backoff", 5, "[0, 3600]", &backoff) != ZY_OK ||
        args_double_in(opts, "--rank-failure-window", 3600, "[0, inf)", &window) != ZY_OK)
        return args_usage_error("supervise", synopsis, opts);
    const char *out = args_get(opts, "--out");
    if (!out) out = command_out(cmd);
    super_opts o = {.out_dir = out ? out : ".",
                    .max_restarts = (int)restarts,
                    .hang_timeout_s = hang,
                    .startup_timeout_s = fmax(hang, 120),
                    .backoff_s = backoff,
                    .rank_window_s = window,
                    .stop_signal = &stop_signal};
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_signal;
    sigaction(SIGINT, &sa, NULL);
    sigaction(SIGTERM, &sa, NULL);
    int code = 1;
    if (super_run(&o, cmd, &code) != ZY_OK) return cli_error("supervise");
    return code;
}
