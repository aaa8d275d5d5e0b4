/* The ranks' heartbeat, for a supervisor that watches for hangs: with ZAYAC_HEARTBEAT_DIR=DIR set,
 * each rank rewrites DIR/rank_R ("STEP UNIX_TIME") as it completes each step. A run that stops
 * making progress stops touching its files. Unset: nothing happens. */
#ifndef ZY_TRAIN_HEARTBEAT_H
#define ZY_TRAIN_HEARTBEAT_H

void heartbeat_beat(long long step, int rank);

#endif
