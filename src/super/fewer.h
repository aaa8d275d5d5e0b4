/* Restarting on fewer ranks: when one rank keeps failing (a bad GPU or host), the supervised
 * command's rank count (`-n N` / `--nprocs N` / `-np N` of zayac launch or mpirun) becomes the
 * largest M < N that divides the global batch, and the run resumes on M ranks through the
 * checkpoint's reshaping (every rank writes what it owns; any count reads it). */
#ifndef ZY_SUPER_FEWER_H
#define ZY_SUPER_FEWER_H

#include <stddef.h>

/* Rewrites the rank count in cmd (the count's argument is pointed at buf, of n bytes). The global
 * batch is the command's training config's batch_size (`--config FILE`, a `--set batch_size=B`
 * winning); when it cannot be read, a divisor of N (which divides any batch N did). Returns 1 with
 * *from and *to set when it changed, 0 when there is no count or no M >= 1 below it. */
int fewer_ranks(char **cmd, char *buf, size_t n, int *from, int *to);

#endif
