/* The processes of this host and their parents, from /proc/N/stat ("pid (comm) state ppid ..."):
 * what the launcher and the supervisor use to find the processes a command started (mpirun forks
 * its ranks itself, a dead launcher leaves ranks orphaned below a subreaper). */
#ifndef ZY_PROC_H
#define ZY_PROC_H

#include <sys/types.h>

/* Fills pid[i] and ppid[i] for up to max processes; returns how many (0 when /proc cannot be
 * read). */
int zy_proc_list(pid_t *pid, pid_t *ppid, int max);

#endif
