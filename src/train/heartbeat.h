/* The ranks' heartbeat, for a supervisor that watches for hangs: with ZAYAC_HEARTBEAT_DIR=DIR set,
 * each rank rewrites DIR/rank_R ("STEP UNIX_TIME START_STEP") as it completes each step;
 * START_STEP is the step this run started from (its checkpoint's, 0 when fresh), so the supervisor
 * knows where a restart resumed as soon as it makes progress (a "resumed from" line on stdout may
 * still sit in a pipe's buffer). A run that stops making progress stops touching its files.
 * Unset: nothing happens. */
#ifndef ZY_TRAIN_HEARTBEAT_H
#define ZY_TRAIN_HEARTBEAT_H

void heartbeat_beat(long long step, long long start_step, int rank);

#endif
