/* Every op of ops.h on every backend against the CPU reference: the case tables of
 * tests/op_cases_*.c run through the op harness (op_harness.h). Without a GPU the CUDA tests skip;
 * the CPU compared with itself still runs every case (inputs identical per run, every output
 * written). OH_FILTER=pattern runs the matching tests only (e.g. "cuda xent*"). */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <cmocka.h>

#include "op_cases.h"

#include <stdlib.h>
#include <string.h>

#ifdef ZY_HAVE_CUDA
/* cudart maps memory in ASan's shadow gap; ASan must leave the gap unprotected (SAN=1 builds). */
const char *__asan_default_options(void);
const char *__asan_default_options(void) {
    return "protect_shadow_gap=0";
}
#endif

int main(void) {
    const struct {
        const oh_case *c;
        const int *n;
    } tables[] = {{oh_cases_dense, &oh_ncases_dense},
                  {oh_cases_attention, &oh_ncases_attention},
                  {oh_cases_cca, &oh_ncases_cca},
                  {oh_cases_moe, &oh_ncases_moe},
                  {oh_cases_elem, &oh_ncases_elem}};
    int n = 0;
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) n += *tables[t].n;
    oh_case *all = malloc((size_t)n * sizeof *all);
    if (!all) return 1;
    n = 0;
    for (size_t t = 0; t < sizeof tables / sizeof tables[0]; t++) {
        memcpy(all + n, tables[t].c, (size_t)*tables[t].n * sizeof *all);
        n += *tables[t].n;
    }
    int rc = oh_main("test_ops_backends", all, n);
    free(all);
    return rc;
}
