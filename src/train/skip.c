/* See skip.h. */
#include "train/skip.h"
#include "base/err.h"

#include <stdio.h>
#include <stdlib.h>

static int listed(const char *list, long long step) {
    for (const char *p = list; *p;) {
        char *end;
        const long long s = strtoll(p, &end, 10);
        if (end == p) return 0;
        if (s == step) return 1;
        p = *end == ',' ? end + 1 : end;
    }
    return 0;
}

void skip_batch_if_marked(zy_batches *b, long long step, int micro_batches, int32_t *ids,
                          int32_t *targets) {
    const char *list = getenv("ZAYAC_SKIP_STEPS");
    if (!list || !listed(list, step)) return;
    printf("step %lld: skipping its batch (ZAYAC_SKIP_STEPS: it diverged twice)\n", step);
    for (int i = 0; i < micro_batches; i++)
        if (batches_next(b, ids, targets) != ZY_OK) return;
}
