/* The supervisor's account: one JSON row per incident in OUT/incidents.jsonl (written as the
 * incident is resolved, so a row holds its downtime), and the totals for OUT/summary.json. */
#ifndef ZY_SUPER_INCIDENT_H
#define ZY_SUPER_INCIDENT_H

#include <stdio.h>

typedef struct {
    double time;          /* when it failed (Unix seconds): an injected fault's announcement, a
                             hang's last progress, else when the run was seen to end */
    char kind[32];        /* crash, exit, hang, divergence, loss-spike, bad-input,
                             corrupt-checkpoint, checkpoint-write-failed */
    int rank;             /* the rank that failed, -1 unknown or all */
    long long step;       /* the failed run's last completed step (divergence: the step that
                             failed), -1 unknown */
    int status;           /* the command's exit status (128+N for signal N), -1 none */
    char action[48];      /* restart, skip-batch, stop, give-up, continue */
    double detected_s;    /* the failure (an injected fault's announcement, else a hang's last
                             progress) to the supervisor's verdict; -1 not known */
    double downtime_s;    /* failure to the first new step after the restart; -1 not measured */
    long long redone;     /* failed run's last step minus the step it resumed from; -1 unknown */
    long long resumed_at; /* the checkpoint step the restart resumed from; -1 none */
    char detail[256];     /* the line that told, or what was done */
    char fault[96];       /* the injected fault that ended the run ("kill on rank 1 at step 31"),
                             "" none */
} super_incident;

typedef struct {
    FILE *f;
    int count, restarts;
    double downtime_s;
    long long redone;
} incident_log;

void incident_init(super_incident *in, double time, const char *kind, const char *action);
/* Opens (appends to) path. */
int incident_log_open(incident_log *log, const char *path);
/* Appends the row (flushed) and adds it to the totals. */
void incident_write(incident_log *log, const super_incident *in);
void incident_log_close(incident_log *log);
/* summary.json (atomic) and a line on stdout: restarts, downtime, steps redone, goodput. */
int incident_summary(const incident_log *log, const char *path, double wall_s, double useful_s,
                     int exit_code);

#endif
