/* The tokenizer fingerprint (see tok_hash.h). */
#include "data/tok_hash.h"
#include "base/err.h"
#include "data/hashmap.h"

#include <string.h>

#define HASH_SEED 0x7A79746F6B763100ULL

uint64_t tok_vocab_hash(const zy_tokenizer *t) {
    int32_t n = tok_vocab_size(t);
    uint64_t h = zy_hash_bytes(&n, sizeof n, HASH_SEED);
    for (int32_t id = 0; id < n; id++) {
        const char *text = tok_token_text(t, id);
        /* an unused id and each token hash differently from one another: the flag byte leads */
        uint8_t flag = !text ? 0 : tok_is_special(t, id) ? 2 : 1;
        h = zy_hash_bytes(&flag, 1, h);
        if (text) h = zy_hash_bytes(text, strlen(text), h);
    }
    return h ? h : 1;
}

int tok_file_hash(const char *path, uint64_t *hash, int32_t *vocab_size) {
    zy_tokenizer *t;
    ZY_TRY(tok_load(&t, path));
    *hash = tok_vocab_hash(t);
    *vocab_size = tok_vocab_size(t);
    tok_free(t);
    return ZY_OK;
}
