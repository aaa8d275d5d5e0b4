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

#endif
