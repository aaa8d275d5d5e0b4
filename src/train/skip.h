/* Skipping a batch that makes training diverge: with ZAYAC_SKIP_STEPS=S1,S2,... (the supervisor
 * sets it when the same step diverged again after a rollback) the micro-batches step S would
 * train on are read and dropped, so the step trains on the next ones. The data position is in
 * every checkpoint, so the skip holds in every later resume. */
#ifndef ZY_TRAIN_SKIP_H
#define ZY_TRAIN_SKIP_H

#include "train/batches.h"

#include <stdint.h>

/* At the start of step `step` (1-based): drops micro_batches batches when the step is listed
 * (into ids/targets, the step's own buffers; a read that fails is left for the step to meet). */
void skip_batch_if_marked(zy_batches *b, long long step, int micro_batches, int32_t *ids,
                          int32_t *targets);

#endif
