/* See supervise.h. The supervisor owns OUT/.aegis/: heartbeat/ (the ranks' progress,
 * train/heartbeat.h) and faults/ (what fault injection fired in this supervised run, so a restart
 * does not fire it again: train/fault.h). It learns why a run ended from its exit status, its
 * heartbeats and the lines it printed (which it passes through unchanged). */
#include "super/supervise.h"
#include "base/err.h"
#include "base/fileio.h"
#include "base/timer.h"
#include "super/child.h"
#include "super/fewer.h"
#include "super/incident.h"

#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

enum {
    PATH_BYTES = 4200,
    FEWER_AFTER = 2 /* failures of the same rank in a row that make the run go on without it */
};

/* What one run of the command showed. */
typedef struct {
    double started, first_beat_t, last_beat_t, progress_t;
    long long first_step; /* the step it started from (its heartbeat's, else its "resumed from"
                             line; else 0) */
    long long last_step;  /* the last step a heartbeat showed completed; -1 before the first */
    long long beat_step;  /* the step of its first heartbeat */
    int rank;             /* the first rank named as failing; -1 none */
    int diverged, spiked, watchdog, hung; /* spiked: the divergence was a loss spike */
    long long diverged_step;
    char why[200];          /* the line that said what failed */
    char fault_line[120];   /* the last fault injected, when no error says more */
    char fault[96];         /* the last injected fault that ends a run ("kill on rank 1 at ...") */
    double fault_t;         /* when its line came (0: none) */
    double ended_t;         /* when the run was seen to end, or declared hung */
    char last_corrupt[512]; /* every rank reports a skipped checkpoint: one incident */
    incident_log *log;
} run_view;

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The first number after `after` in line, or -1. */
static long long number_after(const char *line, const char *after) {
    const char *p = strstr(line, after);
    if (!p) return -1;
    p += strlen(after);
    return *p >= '0' && *p <= '9' ? atoll(p) : -1;
}

static void note_rank(run_view *v, const char *line, const char *after) {
    const long long r = number_after(line, after);
    if (v->rank < 0 && r >= 0) v->rank = (int)r;
}

/* Lines that say what happened: failures (kept for the incident) and recoveries the run made by
 * itself (their own incidents, at once). */
static void on_line(void *user, int is_stderr, const char *line) {
    run_view *v = user;
    if (strstr(line, "resume: skipping a corrupt checkpoint")) {
        if (!strncmp(v->last_corrupt, line, sizeof v->last_corrupt - 1)) return;
        snprintf(v->last_corrupt, sizeof v->last_corrupt, "%s", line);
        super_incident in;
        incident_init(&in, wall_now(), "corrupt-checkpoint", "resumed from an older checkpoint");
        in.step = number_after(line, "/step_");
        snprintf(in.detail, sizeof in.detail, "%s", line);
        incident_write(v->log, &in);
        return;
    }
    if (strstr(line, "warning: checkpoint step")) { /* a failed save; the run goes on */
        super_incident in;
        incident_init(&in, wall_now(), "checkpoint-write-failed", "continue");
        in.step = number_after(line, "warning: checkpoint step ");
        in.rank = (int)number_after(line, "rank ");
        snprintf(in.detail, sizeof in.detail, "%s", line);
        incident_write(v->log, &in);
        return;
    }
    if (!is_stderr) {
        if (!strncmp(line, "resumed from ", 13)) v->first_step = number_after(line, "(step ");
        return;
    }
    note_rank(v, line, "ZAYAC_FAULT: injecting kill on rank ");
    note_rank(v, line, "ZAYAC_FAULT: injecting exit on rank ");
    note_rank(v, line, "ZAYAC_FAULT: injecting hang on rank ");
    note_rank(v, line, "zayac launch: rank ");
    note_rank(v, line, "process rank ");
    if (strstr(line, "training diverged") && !v->diverged) {
        v->diverged = 1;
        v->spiked = strstr(line, "loss spike") != NULL;
        v->diverged_step = number_after(line, "step ");
        snprintf(v->why, sizeof v->why, "%s", line);
    } else if (strstr(line, "did not return within") && !v->watchdog) {
        v->watchdog = 1;
        snprintf(v->why, sizeof v->why, "%s", line);
    } else if (!strncmp(line, "ZAYAC_FAULT: injecting ", 23)) {
        snprintf(v->fault_line, sizeof v->fault_line, "%s", line); /* the latest one */
        if (strncmp(line + 23, "corrupt-checkpoint", 18)) {        /* that one ends no run */
            snprintf(v->fault, sizeof v->fault, "%s", line + 23);
            v->fault_t = wall_now(); /* read as it is written: the fault flushes it first */
        }
    } else if (!v->why[0] && !strncmp(line, "zayac ", 6)) { /* the first error a command said */
        snprintf(v->why, sizeof v->why, "%s", line);
    }
}

/* The heartbeats: the furthest step any rank started and when that was first seen here. */
static void read_beats(run_view *v, const char *dir) {
    DIR *d = opendir(dir);
    if (!d) return;
    long long furthest = -1, start = -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (strncmp(e->d_name, "rank_", 5)) continue;
        char path[PATH_BYTES], *text = NULL;
        snprintf(path, sizeof path, "%s/%s", dir, e->d_name);
        if (zy_read_file(path, &text, NULL) != ZY_OK) continue;
        char *end;
        const long long step = strtoll(text, &end, 10);
        if (end != text && *end == ' ' && step > furthest) {
            furthest = step;
            char *rest; /* "STEP TIME START": where the run resumed */
            strtod(end, &rest);
            char *stop;
            const long long from = strtoll(rest, &stop, 10);
            if (stop != rest) start = from;
        }
        free(text);
    }
    closedir(d);
    if (furthest < 0) return;
    if (start >= 0) v->first_step = start;
    const double t = wall_now();
    if (v->last_step < 0) v->beat_step = furthest, v->first_beat_t = t;
    if (furthest > v->last_step) v->last_step = furthest, v->last_beat_t = t, v->progress_t = t;
}

/* The command for this start: on a restart --overwrite dropped and --resume added. */
static char **command_for(char *const cmd[], int restart) {
    int n = 0, has_resume = 0;
    while (cmd[n]) has_resume |= !strcmp(cmd[n++], "--resume");
    char **argv = zy_calloc((size_t)n + 2, sizeof *argv);
    int k = 0;
    for (int i = 0; i < n; i++)
        if (!restart || strcmp(cmd[i], "--overwrite")) argv[k++] = cmd[i];
    if (restart && !has_resume) argv[k++] = "--resume";
    argv[k] = NULL;
    return argv;
}

/* Waits s seconds unless a stop signal comes first (returns 1 then). */
static int wait_unless_stopped(const super_opts *o, double s) {
    const double until = zy_now() + s;
    while (zy_now() < until) {
        if (*o->stop_signal) return 1;
        usleep(20000);
    }
    return *o->stop_signal != 0;
}

/* The supervision's account across runs. */
typedef struct {
    incident_log log;
    super_incident open; /* the failure waiting for the restart's first new step */
    int have_open;
    run_view prev; /* the run that failed */
    double useful_s;
} super_state;

/* Useful training time of a run: its steps (at the pace its heartbeats showed) less the steps a
 * later restart redid. */
static double useful_time(const run_view *v, long long redone) {
    if (v->last_step <= v->beat_step) return 0; /* one heartbeat: no pace measured */
    const double per_step =
        (v->last_beat_t - v->first_beat_t) / (double)(v->last_step - v->beat_step);
    const long long kept = v->last_step - v->first_step - (redone > 0 ? redone : 0);
    return kept > 0 ? per_step * (double)kept : 0;
}

/* The open failure is resolved by the run v after it: downtime from the failure to v's first new
 * step (or to now, when v made none), steps redone from where v resumed. */
static void resolve_open(super_state *s, const run_view *v) {
    if (!s->have_open) return;
    s->open.resumed_at = v->first_step;
    const long long failed_at = s->prev.last_step >= 0 ? s->prev.last_step : s->prev.first_step;
    if (failed_at >= v->first_step) s->open.redone = failed_at - v->first_step;
    s->open.downtime_s = (v->last_step >= 0 ? v->first_beat_t : wall_now()) - s->open.time;
    incident_write(&s->log, &s->open);
    s->useful_s += useful_time(&s->prev, s->open.redone);
    s->have_open = 0;
}

typedef struct {
    char hb_dir[PATH_BYTES], fault_dir[PATH_BYTES], skip[512];
    char env_hb[PATH_BYTES + 32], env_fault[PATH_BYTES + 32], env_skip[600];
} super_paths;

/* Runs the command once: until it ends, or hangs (killed, v->hung), passing a stop signal on
 * (a second one kills it). Returns its status as a shell gives it (128+N for signal N). */
static int run_once(const super_opts *o, char *const argv[], super_paths *p, super_state *s,
                    run_view *v, int *stop_asked) {
    zy_remove_tree(p->hb_dir);
    zy_mkdirs(p->hb_dir);
    char *env[4] = {p->env_hb, p->env_fault, p->skip[0] ? p->env_skip : NULL, NULL};
    super_child c;
    v->started = v->progress_t = wall_now();
    if (child_start(&c, argv, env, on_line, v) != ZY_OK) return -1;
    int status = 0, forwarded = 0;
    for (;;) {
        child_pump(&c, 100);
        if (child_ended(&c, &status)) break;
        if (*o->stop_signal) {
            const int sig = (int)*o->stop_signal;
            *o->stop_signal = 0;
            *stop_asked = 1;
            fprintf(stderr,
                    forwarded ? "supervise: second signal: killing the run\n"
                              : "supervise: signal %d: passing it to the run, which "
                                "saves and stops\n",
                    sig);
            if (forwarded)
                child_kill_all(&c);
            else
                child_signal(&c, sig);
            forwarded = 1;
        }
        read_beats(v, p->hb_dir);
        if (v->last_step >= 0) resolve_open(s, v);
        const double limit = v->last_step < 0 ? o->startup_timeout_s : o->hang_timeout_s;
        if (o->hang_timeout_s > 0 && !*stop_asked && wall_now() - v->progress_t > limit) {
            fprintf(stderr,
                    "supervise: no progress for %.1f s (last step %lld): hung; "
                    "stopping the run\n",
                    wall_now() - v->progress_t, v->last_step);
            v->hung = 1;
            child_kill_all(&c);
            waitpid(c.pid, &status, 0);
            break;
        }
    }
    v->ended_t = wall_now();
    child_finish(&c, 2000);
    child_kill_all(&c); /* anything it left behind */
    read_beats(v, p->hb_dir);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

/* The incident of a failed run: its kind and what the supervisor does about it. */
static void describe_failure(const run_view *v, int code, int repeat_divergence,
                             super_incident *in) {
    const char *kind = v->hung       ? "hang"
                       : v->watchdog ? "hang"
                       : v->spiked   ? "loss-spike"
                       : v->diverged ? "divergence"
                       : code == 2   ? "bad-input"
                       : code >= 128 ? "crash"
                                     : "exit";
    const char *action = code == 2 && !v->hung ? "stop"
                         : repeat_divergence   ? "skip-batch"
                                               : "restart";
    /* when it failed: the injected fault's announcement, else a hang's last progress, else when
     * the run was seen to end (a crash is known no sooner) */
    const double failed_t = v->fault_t > 0 ? v->fault_t : v->hung ? v->progress_t : v->ended_t;
    incident_init(in, failed_t, kind, action);
    in->rank = v->rank;
    in->step = v->diverged && v->diverged_step > 0 ? v->diverged_step
               : v->last_step >= 0                 ? v->last_step
                                                   : v->first_step;
    in->status = v->hung ? -1 : code;
    snprintf(in->fault, sizeof in->fault, "%s", v->fault);
    if (v->fault_t > 0 || v->hung) in->detected_s = v->ended_t - failed_t;
    const char *why = v->why[0] ? v->why : v->fault_line;
    if (v->hung)
        snprintf(in->detail, sizeof in->detail, "no progress after step %lld%s%s", v->last_step,
                 why[0] ? "; " : "", why);
    else if (code >= 128 && code < 160)
        snprintf(in->detail, sizeof in->detail, "signal %d%s%s", code - 128, why[0] ? ": " : "",
                 why);
    else
        snprintf(in->detail, sizeof in->detail, "%s", why);
}

int super_run(const super_opts *o, char *const cmd[], int *exit_code) {
    prctl(PR_SET_CHILD_SUBREAPER, 1); /* ranks a dead launcher orphans stay ours to end */
    super_paths p;
    memset(&p, 0, sizeof p);
    char incidents[PATH_BYTES], summary[PATH_BYTES];
    ZY_TRY(zy_mkdirs(o->out_dir));
    snprintf(incidents, sizeof incidents, "%s/incidents.jsonl", o->out_dir);
    snprintf(summary, sizeof summary, "%s/summary.json", o->out_dir);
    snprintf(p.hb_dir, sizeof p.hb_dir, "%s/.aegis/heartbeat", o->out_dir);
    snprintf(p.fault_dir, sizeof p.fault_dir, "%s/.aegis/faults", o->out_dir);
    zy_remove_tree(p.fault_dir); /* a new supervised run: every injected fault may fire once */
    ZY_TRY(zy_mkdirs(p.fault_dir));
    snprintf(p.env_hb, sizeof p.env_hb, "ZAYAC_HEARTBEAT_DIR=%s", p.hb_dir);
    snprintf(p.env_fault, sizeof p.env_fault, "ZAYAC_FAULT_STATE=%s", p.fault_dir);
    super_state s;
    memset(&s, 0, sizeof s);
    ZY_TRY(incident_log_open(&s.log, incidents));
    const double t0 = wall_now();
    int restarts = 0, fruitless = 0, stop_asked = 0, same_rank = 0, last_rank = -1, ncmd = 0;
    double last_rank_t = 0; /* when last_rank failed */
    /* restarts in a row that did not get past the furthest failure so far (--max-restarts
     * bounds these, not all restarts: a month-long run that fails now and then but moves on
     * each time must not give up, one that fails at the same place again and again must) */
    long long furthest_failure = -1;
    int stuck = 0;
    long long last_diverged = -1;
    while (cmd[ncmd]) ncmd++;
    char **current = zy_calloc((size_t)ncmd + 1, sizeof *current), ranks_buf[16];
    memcpy(current, cmd, (size_t)ncmd * sizeof *current); /* its rank count may change */
    for (;;) {
        run_view v;
        memset(&v, 0, sizeof v);
        v.last_step = v.diverged_step = -1;
        v.rank = -1;
        v.log = &s.log;
        char **argv = command_for(current, restarts > 0);
        const int code = run_once(o, argv, &p, &s, &v, &stop_asked);
        free(argv);
        if (code < 0) {
            incident_log_close(&s.log);
            free(current);
            return ZY_ERR;
        }
        resolve_open(&s, &v); /* when this run ended before a new step */
        if (stop_asked || code == 0 || (code == 3 && !v.hung)) {
            s.useful_s += useful_time(&v, 0);
            *exit_code = stop_asked && code == 0 ? 0 : (stop_asked ? 3 : code);
            break;
        }
        const int repeat = v.diverged && v.diverged_step > 0 && v.diverged_step == last_diverged;
        describe_failure(&v, code, repeat, &s.open);
        if (v.diverged) last_diverged = v.diverged_step;
        const long long reached = v.last_step >= 0 ? v.last_step : v.first_step;
        stuck = reached > furthest_failure ? 0 : stuck + 1;
        if (reached > furthest_failure) furthest_failure = reached;
        if (!strcmp(s.open.action, "stop") || stuck >= o->max_restarts) {
            if (strcmp(s.open.action, "stop"))
                snprintf(s.open.action, sizeof s.open.action, "give-up");
            s.open.downtime_s = 0;
            incident_write(&s.log, &s.open);
            s.useful_s += useful_time(&v, 0);
            *exit_code = code == 2 ? 2 : 1;
            break;
        }
        if (repeat) { /* the same step diverged again after a rollback: skip its batch */
            const size_t k = strlen(p.skip);
            snprintf(p.skip + k, sizeof p.skip - k, "%s%lld", k ? "," : "", v.diverged_step);
            snprintf(p.env_skip, sizeof p.env_skip, "ZAYAC_SKIP_STEPS=%s", p.skip);
        }
        /* one rank failing again and again (a bad device or host): go on without it. A
         * divergence is not one rank's failure (every rank sees the same reduced loss; which one
         * reported it first is chance), so it neither counts nor breaks the run of failures. */
        if (!v.diverged) {
            const int again = s.open.rank >= 0 && s.open.rank == last_rank &&
                              s.open.time - last_rank_t <= o->rank_window_s;
            same_rank = again ? same_rank + 1 : 1;
            last_rank = s.open.rank;
            last_rank_t = s.open.time;
        }
        int from, to;
        if (!repeat && !v.diverged && s.open.rank >= 0 && same_rank >= FEWER_AFTER &&
            fewer_ranks(current, ranks_buf, sizeof ranks_buf, &from, &to)) {
            snprintf(s.open.action, sizeof s.open.action, "fewer-ranks");
            const size_t k = strlen(s.open.detail);
            snprintf(s.open.detail + k, sizeof s.open.detail - k,
                     "%srank %d failed %d times in a row: restarting on %d of %d ranks",
                     k ? "; " : "", s.open.rank, same_rank, to, from);
            same_rank = 0;
            last_rank = -1;
        }
        char rank[32] = "";
        if (s.open.rank >= 0) snprintf(rank, sizeof rank, ", rank %d", s.open.rank);
        fprintf(stderr,
                "supervise: %s%s (%s); %s from the newest checkpoint (restart %d; failures in "
                "a row at or before step %lld: %d of %d allowed)\n",
                s.open.kind, rank, s.open.detail[0] ? s.open.detail : "no message", s.open.action,
                restarts + 1, furthest_failure, stuck, o->max_restarts);
        s.have_open = 1;
        s.prev = v;
        s.log.restarts = ++restarts;
        fruitless = v.last_step > v.first_step ? 0 : fruitless + 1;
        const double wait = fmin(60, o->backoff_s * pow(2, fruitless > 0 ? fruitless - 1 : 0));
        if (wait > 0 && wait_unless_stopped(o, wait)) {
            *exit_code = 3; /* asked to stop between runs: the checkpoints are as they are */
            break;
        }
    }
    if (s.have_open) { /* a failure no run recovered from */
        s.open.downtime_s = wall_now() - s.open.time;
        incident_write(&s.log, &s.open);
    }
    const int rc = incident_summary(&s.log, summary, wall_now() - t0, s.useful_s, *exit_code);
    incident_log_close(&s.log);
    free(current);
    return rc;
}
