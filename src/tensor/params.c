/* Parameter table (see params.h). */
#include "tensor/params.h"
#include "base/err.h"

#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

void params_init(zy_param_table *t) {
    memset(t, 0, sizeof *t);
}

void params_free(zy_param_table *t) {
    free(t->items);
    memset(t, 0, sizeof *t);
}

int params_add(zy_param_table *t, const char *name, int ndim, const int64_t *shape,
               zy_param_kind kind, int layer) {
    ZY_CHECK(ndim >= 1 && ndim <= ZY_MAX_DIMS);
    ZY_CHECK(strlen(name) < ZY_PARAM_NAME_MAX);
    if (t->count == t->cap) {
        t->cap = t->cap ? 2 * t->cap : 64;
        t->items = zy_realloc(t->items, (size_t)t->cap * sizeof *t->items);
    }
    zy_param *p = &t->items[t->count];
    memset(p, 0, sizeof *p);
    snprintf(p->name, sizeof p->name, "%s", name);
    p->ndim = ndim;
    p->numel = 1;
    for (int i = 0; i < ndim; i++) {
        ZY_CHECK(shape[i] > 0);
        p->shape[i] = shape[i];
        if (__builtin_mul_overflow(p->numel, (uint64_t)shape[i], &p->numel)) t->overflow = 1;
    }
    p->kind = kind;
    p->layer = layer;
    if (t->pack_next && t->count > 0) {
        const zy_param *prev = &t->items[t->count - 1];
        p->offset = prev->offset + prev->numel;
        t->pack_next = 0;
    } else {
        p->offset = t->total;
    }
    /* 64-byte alignment for vector loads; past SIZE_MAX the table is only good for refusing */
    size_t end;
    if (t->overflow || __builtin_add_overflow(p->offset, p->numel, &end) ||
        __builtin_add_overflow(end, (size_t)15, &end)) {
        t->overflow = 1;
        t->total = SIZE_MAX;
    } else {
        t->total = end & ~(size_t)15;
    }
    return t->count++;
}

void params_pack_next(zy_param_table *t) {
    t->pack_next = 1;
}

int params_find(const zy_param_table *t, const char *name) {
    for (int i = 0; i < t->count; i++)
        if (strcmp(t->items[i].name, name) == 0) return i;
    return -1;
}

void params_shape_str(const zy_param *p, char *buf, size_t n) {
    size_t used = (size_t)snprintf(buf, n, "[");
    for (int i = 0; i < p->ndim && used < n; i++)
        used +=
            (size_t)snprintf(buf + used, n - used, i ? ", %lld" : "%lld", (long long)p->shape[i]);
    if (used < n) snprintf(buf + used, n - used, "]");
}
