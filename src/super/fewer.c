/* See fewer.h. */
#include "super/fewer.h"
#include "base/err.h"
#include "base/fileio.h"

#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* The global batch the command trains with, or 0 when it cannot be told. */
static long batch_of(char **cmd) {
    long batch = 0;
    for (int i = 0; cmd[i] && cmd[i + 1]; i++) {
        if (!strcmp(cmd[i], "--config")) {
            char *text = NULL;
            if (zy_read_file(cmd[i + 1], &text, NULL) != ZY_OK) {
                zy_err_clear();
                continue;
            }
            cJSON *j = cJSON_Parse(text);
            const cJSON *b = cJSON_GetObjectItem(j, "batch_size");
            if (cJSON_IsNumber(b)) batch = (long)b->valuedouble;
            cJSON_Delete(j);
            free(text);
        }
    }
    for (int i = 0; cmd[i] && cmd[i + 1]; i++) /* after the file: --set wins */
        if (!strcmp(cmd[i], "--set") && !strncmp(cmd[i + 1], "batch_size=", 11))
            batch = atol(cmd[i + 1] + 11);
    return batch;
}

int fewer_ranks(char **cmd, char *buf, size_t n, int *from, int *to) {
    int at = -1;
    for (int i = 0; cmd[i] && cmd[i + 1] && at < 0; i++)
        if (!strcmp(cmd[i], "-n") || !strcmp(cmd[i], "--nprocs") || !strcmp(cmd[i], "-np"))
            at = i + 1;
    if (at < 0) return 0;
    const int ranks = atoi(cmd[at]);
    const long batch = batch_of(cmd);
    int m = ranks - 1;
    while (m >= 1 && (batch > 0 ? batch % m : ranks % m)) m--;
    if (m < 1) return 0;
    snprintf(buf, n, "%d", m);
    cmd[at] = buf;
    *from = ranks;
    *to = m;
    return 1;
}
