/* Shared by the checkpoint tests: two checkpoint folders compared as a reader sees them, whatever
 * number of ranks wrote them, by reading the files themselves (not through the trainer's code). */
#ifndef ZY_TEST_CKPT_COMPARE_H
#define ZY_TEST_CKPT_COMPARE_H

#include <stddef.h>

/* Compares checkpoint folders a and b: every tensor of the .safetensors files under model/ and
 * under train/ by its global name, whichever file (rank) holds it: dtype, shape and bytes; a name
 * held by two files of a folder, or by one folder only, is a difference. Then model/config.json
 * and train/state.json as JSON values (step, counters, the data position). Returns the number of
 * differences (0: the same bit for bit), the first few described in why[n]; *tensors gets the
 * number of tensors of a compared. -1 when a folder cannot be read (why says why). */
int ckpt_compare(const char *a, const char *b, int *tensors, char *why, size_t n);

#endif
