/* The op case tables of the op harness (op_harness.h), one per family of ops. */
#ifndef ZY_OP_CASES_H
#define ZY_OP_CASES_H

#include "op_harness.h"

extern const oh_case oh_cases_dense[]; /* op_cases_dense.c */
extern const int oh_ncases_dense;
extern const oh_case oh_cases_attention[]; /* op_cases_attention.c */
extern const int oh_ncases_attention;
extern const oh_case oh_cases_cca[]; /* op_cases_cca.c */
extern const int oh_ncases_cca;
extern const oh_case oh_cases_moe[]; /* op_cases_moe.c */
extern const int oh_ncases_moe;
extern const oh_case oh_cases_elem[]; /* op_cases_elem.c */
extern const int oh_ncases_elem;

/* max |x[i]| over the finite ones of n elements (op_cases_elem.c): the size of terms a tolerance
 * scales with, which a masked -inf would make vacuous. */
double oh_maxabs(const float *x, size_t n);
/* max over rows n, columns c of |rstd[n] g[n,c] w[c]|: the size of RMSNorm's dx terms. */
double oh_norm_terms(const float *rstd, const float *g, const float *w, int N, int C);

#endif
