/* Fuzz target: a tokenizer.json (data/tokenizer.h); one that loads encodes and decodes a text
 * of mixed scripts, and decodes every id of its vocabulary. */
#include "base/err.h"
#include "data/tokenizer.h"
#include "fuzz.h"

#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    zy_tokenizer *t;
    if (tok_load(&t, fuzz_input_file(data, size)) == ZY_OK) {
        static const char text[] = "Hello, world! 123 \n\n\t  x\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 "
                                   "\xf0\x9f\x98\x80 <|endoftext|> \xff\xfe end";
        zy_ids ids = {0};
        for (int flags = 0; flags <= TOK_SPECIAL; flags += TOK_SPECIAL) {
            ids.n = 0;
            if (tok_encode(t, text, sizeof text - 1, flags, &ids) == ZY_OK) {
                char *out = NULL;
                size_t len;
                if (tok_decode(t, ids.data, ids.n, 0, &out, &len) == ZY_OK) free(out);
            }
        }
        int32_t v = tok_vocab_size(t);
        for (int32_t id = 0; id < v && id < 2048; id++) {
            char *out = NULL;
            size_t len;
            if (tok_decode(t, &id, 1, TOK_SKIP_SPECIAL, &out, &len) == ZY_OK) free(out);
        }
        ids_free(&ids);
        tok_free(t);
    }
    zy_err_clear();
    return 0;
}
