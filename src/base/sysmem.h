/* How much host memory this process can still take: what sizing checks compare a job's needs with
 * before allocating (an allocation the machine cannot back would abort or summon the OOM killer
 * instead of failing with a message). */
#ifndef ZY_SYSMEM_H
#define ZY_SYSMEM_H

#include <stddef.h>

/* Bytes available: /proc/meminfo's MemAvailable, lowered to the room left under this process's
 * cgroup memory limit when one is set (v2 memory.max, v1 memory.limit_in_bytes). Returns 0 and
 * sets *bytes, or -1 when not even MemAvailable can be read (*bytes = 0). */
int zy_host_mem_available(size_t *bytes);
/* Bytes of physical memory (MemTotal); 0 when unknown. */
size_t zy_host_mem_total(void);

#endif
