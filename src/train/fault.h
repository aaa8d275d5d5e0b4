/* Fault injection for the supervisor's tests and drills: ZAYAC_FAULT=KIND[:rank=R][:step=S],
 * several separated by commas. Kinds: kill (SIGKILL this rank), exit (exit 1), hang (stop making
 * progress, alive), nan (a non-finite weight, so the step's loss is not finite), spike (this rank's
 * share of the step's loss multiplied, so the step's loss is about 100 times what it would be and
 * the loss-spike detector, train/spike.h, sees it; weights and gradients untouched),
 * corrupt-checkpoint (damage the checkpoint of step S once it is committed), enospc (the checkpoint
 * write of step S fails as on a full disk), diverge (one weight every rank keeps moved on this
 * rank alone: the replica check's drill). rank defaults to 0; step to the first step the run
 * reaches (for the checkpoint kinds: the first save). A fault fires where its rank reaches its
 * step; with ZAYAC_FAULT_STATE=DIR (the supervisor sets it) it fires once per DIR: a file there
 * records it, so a restarted run does not fire it again. Without the variable nothing here costs
 * more than a getenv. */
#ifndef ZY_TRAIN_FAULT_H
#define ZY_TRAIN_FAULT_H

#include "train/step.h"

/* At the start of step `step` (1-based) on `rank`: kill, exit, hang, poison a weight (nan), move
 * one replicated weight on this rank alone (diverge: the next checkpoint's replica check trips)
 * or inflate the step's loss (spike). */
void fault_at_step(zy_step *s, long long step, int rank);
/* In a checkpoint writer, before writing step `step`: ZY_ERR (a full-disk message) for enospc. */
int fault_checkpoint_write(long long step, int rank);
/* After the checkpoint folder `dir` of step `step` is committed (rank 0): corrupt-checkpoint
 * overwrites bytes in the middle of its weights, so it no longer verifies. */
void fault_checkpoint_written(const char *dir, long long step);

#endif
