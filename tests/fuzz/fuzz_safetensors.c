/* Fuzz target: a .safetensors file (io/safetensors.h): the header, then every tensor read as
 * fp32 (those small enough to read). */
#include "base/err.h"
#include "fuzz.h"
#include "io/safetensors.h"

#include <stdlib.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    zy_safetensors f;
    if (safetensors_open(&f, fuzz_input_file(data, size)) == ZY_OK) {
        for (int i = 0; i < f.count; i++) {
            if (f.tensors[i].numel > ((size_t)1 << 24)) continue;
            float *out = malloc((f.tensors[i].numel + 1) * sizeof *out);
            safetensors_read_index_f32(&f, i, out);
            free(out);
        }
        safetensors_meta_get(&f, "format");
        safetensors_close(&f);
    }
    zy_err_clear();
    return 0;
}
