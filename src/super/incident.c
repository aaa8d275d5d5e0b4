/* See incident.h. */
#include "super/incident.h"
#include "base/err.h"
#include "base/fileio.h"

#include <cjson/cJSON.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

void incident_init(super_incident *in, double time, const char *kind, const char *action) {
    memset(in, 0, sizeof *in);
    in->time = time;
    snprintf(in->kind, sizeof in->kind, "%s", kind);
    snprintf(in->action, sizeof in->action, "%s", action);
    in->rank = -1;
    in->step = -1;
    in->status = -1;
    in->downtime_s = -1;
    in->detected_s = -1;
    in->redone = -1;
    in->resumed_at = -1;
}

int incident_log_open(incident_log *log, const char *path) {
    memset(log, 0, sizeof *log);
    log->f = fopen(path, "a");
    if (!log->f) return zy_fail_errno(path, "cannot open", errno);
    return ZY_OK;
}

static void iso_time(double t, char *buf, size_t n) {
    const time_t s = (time_t)t;
    struct tm tm;
    gmtime_r(&s, &tm);
    char base[32];
    strftime(base, sizeof base, "%Y-%m-%dT%H:%M:%S", &tm);
    snprintf(buf, n, "%s.%03dZ", base, (int)((t - (double)s) * 1000));
}

/* A number, or null where it was not known. */
static void add_known(cJSON *o, const char *key, double v, int known) {
    if (known)
        cJSON_AddNumberToObject(o, key, v);
    else
        cJSON_AddNullToObject(o, key);
}

void incident_write(incident_log *log, const super_incident *in) {
    char when[48];
    iso_time(in->time, when, sizeof when);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "time", when);
    cJSON_AddStringToObject(o, "kind", in->kind);
    add_known(o, "rank", in->rank, in->rank >= 0);
    add_known(o, "step", (double)in->step, in->step >= 0);
    add_known(o, "status", in->status, in->status >= 0);
    cJSON_AddStringToObject(o, "action", in->action);
    add_known(o, "detected_after_s", in->detected_s, in->detected_s >= 0);
    add_known(o, "downtime_s", in->downtime_s, in->downtime_s >= 0);
    add_known(o, "steps_redone", (double)in->redone, in->redone >= 0);
    add_known(o, "resumed_from_step", (double)in->resumed_at, in->resumed_at >= 0);
    cJSON_AddStringToObject(o, "detail", in->detail);
    if (in->fault[0])
        cJSON_AddStringToObject(o, "fault", in->fault);
    else
        cJSON_AddNullToObject(o, "fault");
    char *text = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    fprintf(log->f, "%s\n", text);
    fflush(log->f);
    free(text);
    log->count++;
    if (in->downtime_s > 0) log->downtime_s += in->downtime_s;
    if (in->redone > 0) log->redone += in->redone;
}

void incident_log_close(incident_log *log) {
    if (log->f) fclose(log->f);
    log->f = NULL;
}

int incident_summary(const incident_log *log, const char *path, double wall_s, double useful_s,
                     int exit_code) {
    const double goodput = wall_s > 0 ? useful_s / wall_s : 0;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "exit_status", exit_code);
    cJSON_AddNumberToObject(o, "incidents", log->count);
    cJSON_AddNumberToObject(o, "restarts", log->restarts);
    cJSON_AddNumberToObject(o, "downtime_s", log->downtime_s);
    cJSON_AddNumberToObject(o, "steps_redone", (double)log->redone);
    cJSON_AddNumberToObject(o, "wall_s", wall_s);
    cJSON_AddNumberToObject(o, "useful_s", useful_s);
    cJSON_AddNumberToObject(o, "goodput", goodput);
    char *text = cJSON_Print(o);
    cJSON_Delete(o);
    const int rc = zy_write_file_atomic(path, text, strlen(text));
    free(text);
    printf("supervise: %d incident%s, %d restart%s, downtime %.1f s, %lld steps redone; "
           "wall %.1f s, goodput %.3f (exit %d)\n",
           log->count, log->count == 1 ? "" : "s", log->restarts, log->restarts == 1 ? "" : "s",
           log->downtime_s, (long long)log->redone, wall_s, goodput, exit_code);
    fflush(stdout);
    return rc;
}
