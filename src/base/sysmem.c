/* Host memory available to this process (see sysmem.h). */
#include "base/sysmem.h"

#include <stdio.h>
#include <string.h>

/* The value of "key: N kB" in /proc/meminfo, in bytes (0 when absent). */
static size_t meminfo_bytes(const char *key) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    size_t kb = 0, klen = strlen(key);
    while (fgets(line, sizeof line, f))
        if (!strncmp(line, key, klen) && line[klen] == ':') {
            unsigned long long v;
            if (sscanf(line + klen + 1, "%llu", &v) == 1) kb = (size_t)v;
            break;
        }
    fclose(f);
    return kb * 1024;
}

/* The first number in a file (0 when unreadable or "max"). */
static size_t file_number(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    unsigned long long v = 0;
    if (fscanf(f, "%llu", &v) != 1) v = 0;
    fclose(f);
    return (size_t)v;
}

/* Room left under the cgroup's limit (0 when there is no limit we can read). A container's
 * MemAvailable shows the whole machine, but its limit is what the OOM killer enforces. */
static size_t cgroup_room(void) {
    static const char *const pairs[][2] = {
        {"/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory.current"},
        {"/sys/fs/cgroup/memory/memory.limit_in_bytes",
         "/sys/fs/cgroup/memory/memory.usage_in_bytes"},
    };
    for (int i = 0; i < 2; i++) {
        size_t limit = file_number(pairs[i][0]);
        if (limit == 0 || limit >= ((size_t)1 << 60)) continue; /* "max" or v1's "no limit" */
        size_t used = file_number(pairs[i][1]);
        return limit > used ? limit - used : 1;
    }
    return 0;
}

int zy_host_mem_available(size_t *bytes) {
    size_t avail = meminfo_bytes("MemAvailable"), room = cgroup_room();
    if (room && (avail == 0 || room < avail)) avail = room;
    *bytes = avail;
    return avail ? 0 : -1;
}

size_t zy_host_mem_total(void) {
    return meminfo_bytes("MemTotal");
}
