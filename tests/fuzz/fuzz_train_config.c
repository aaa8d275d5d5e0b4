/* Fuzz target: a training config (train/train_config.h): the settings table's parsing and
 * checks, the inline model config, and the resolved config printed back. */
#include "base/err.h"
#include "fuzz.h"
#include "train/train_config.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    zy_train_config *c = malloc(sizeof *c);
    char *json = NULL;
    if (!c) abort();
    if (train_config_build(c, fuzz_input_file(data, size), NULL, 0, &json) == ZY_OK) free(json);
    free(c);
    zy_err_clear();
    return 0;
}
