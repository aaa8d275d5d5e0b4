/* Fuzz target: a model config.json (model/config.h) through parsing, validation and the
 * parameter table a valid one builds (its counts); a valid config must also survive writing and
 * reading back. */
#include "base/err.h"
#include "fuzz.h"
#include "model/config.h"
#include "model/model.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = fuzz_input_text(data, size);
    zy_config c;
    config_defaults(&c);
    if (config_parse_json(&c, text, "fuzz") == ZY_OK && config_validate(&c, "fuzz") == ZY_OK) {
        zy_param_counts k = model_count_params(&c);
        ZY_CHECK(k.total > 0 && k.embedding > 0 && k.active_no_embed > 0);
        char *json = config_to_json(&c);
        zy_config back;
        config_defaults(&back);
        ZY_CHECKF(config_parse_json(&back, json, "written") == ZY_OK &&
                      config_validate(&back, "written") == ZY_OK,
                  "a valid config written out does not read back: %s", zy_errmsg());
        free(json);
    }
    zy_err_clear();
    free(text);
    return 0;
}
