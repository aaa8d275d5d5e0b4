/* Fuzz target: a .npy file (io/npy.h) read as it is and as int32. */
#include "base/err.h"
#include "fuzz.h"
#include "io/npy.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_input_file(data, size);
    zy_npy a;
    if (npy_read(&a, path) == ZY_OK) npy_free(&a);
    if (npy_read_as(&a, path, ZY_NPY_I32) == ZY_OK) npy_free(&a);
    zy_err_clear();
    return 0;
}
