/* See proc.h. */
#include "base/proc.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int zy_proc_list(pid_t *pid, pid_t *ppid, int max) {
    DIR *d = opendir("/proc");
    if (!d) return 0;
    int n = 0;
    struct dirent *e;
    while (n < max && (e = readdir(d)) != NULL) {
        if (e->d_name[0] < '1' || e->d_name[0] > '9') continue;
        char path[300], buf[512];
        snprintf(path, sizeof path, "/proc/%s/stat", e->d_name);
        FILE *f = fopen(path, "r");
        if (!f) continue; /* it ended meanwhile */
        size_t k = fread(buf, 1, sizeof buf - 1, f);
        fclose(f);
        buf[k] = 0;
        const char *close_paren = strrchr(buf, ')'); /* the name may hold spaces */
        char state;
        int parent;
        if (close_paren && sscanf(close_paren + 1, " %c %d", &state, &parent) == 2) {
            pid[n] = (pid_t)atoi(e->d_name);
            ppid[n++] = (pid_t)parent;
        }
    }
    closedir(d);
    return n;
}
