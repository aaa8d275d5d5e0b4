/* Fuzz target: a token shard (data/shard.h), opened with and without its checksum checked, every
 * token read. */
#include "base/err.h"
#include "data/shard.h"
#include "fuzz.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const char *path = fuzz_input_file(data, size);
    for (int verify = 0; verify <= 1; verify++) {
        zy_shard s;
        if (shard_open(&s, path, verify) != ZY_OK) continue;
        int32_t buf[1024];
        for (uint64_t i = 0; i < s.h.ntokens; i += 1024) {
            uint64_t n = s.h.ntokens - i < 1024 ? s.h.ntokens - i : 1024;
            shard_read(&s, i, n, buf);
        }
        shard_close(&s);
    }
    zy_err_clear();
    return 0;
}
