/* The coefficients of Muon's Newton-Schulz iterations: x = a x + (b A + c A A) x, A = x x^T, each
 * iteration applying the odd quintic p(s) = a s + b s^3 + c s^5 to every normalised singular
 * value s of x (in [0, 1] after the Frobenius normalisation).
 *
 * fixed: Muon's (3.4445, -4.7750, 2.0315) at every iteration. It is tuned to lift small values
 *   fast, not to converge: values keep oscillating in about [0.7, 1.2].
 * minimax: a quintic of its own for each iteration, the greedy minimax construction of Polar
 *   Express (Amsel, Persson, Musco, Gower, 2025) computed here: iteration t takes the quintic
 *   closest to 1 in the max norm over the interval [lo_t, hi_t] the earlier ones leave (a Remez
 *   exchange; its error equioscillates at the two ends and the two interior extremes), and the
 *   interval becomes [min p, max p]. The starting interval [l, 1] is chosen for the iteration
 *   count so that the last interval is [0.7, 1.3] (the fixed quintic's own spread), the smallest l
 *   that allows down to l = 1e-4 (about 6 iterations; more narrow the last interval instead): with
 *   4 iterations every value from 0.0027 ends in [0.7, 1.3] (the fixed quintic needs 5 iterations
 *   for values from 0.0011 to reach 0.5, and 4 for values from 0.0037). Each quintic is applied to
 *   s / 1.05, so values that bf16 rounding pushed up to 5% past an interval's top still land in
 *   the next one; past it a quintic's s^5 term takes over and the iteration diverges (the fixed
 *   quintic folds values up to ~1.26 back); a factor of 1.01 left 1%. */
#ifndef ZY_NS_COEF_H
#define ZY_NS_COEF_H

typedef enum { ZY_NS_FIXED = 0, ZY_NS_MINIMAX = 1 } zy_ns_coefs;
extern const char *const zy_ns_coefs_names[]; /* "fixed", "minimax", NULL */

/* What the iterate starts from. frobenius: x / ||x||_F, whose singular values are s_i / ||s||_2,
 * so the wider the matrix the smaller they start. aol: then also the rows of x on the Gram side
 * scaled by d_i = (sum_j |A_ij|)^-1/2, A = x x^T (the almost-orthogonal-layer rescaling of Prach
 * and Lampert 2022, used before Newton-Schulz by Turbo-Muon, Boissin et al. 2025), and A by
 * d_i d_j so the first iteration reuses it: ||D x||_2 <= 1 still holds (the Schur test), and the
 * small singular values start larger, so fewer iterations lift them to the plateau. D x has
 * other singular vectors than x, so the update approaches the orthogonal factor of D x, not of x:
 * a change of the optimizer, judged by training (results/one-gpu-limit/README.md, nineteenth
 * session), not an exact preconditioner. The cost is the row sums of A and passes over the
 * [s, s] matrices, once per step. */
typedef enum { ZY_NS_PRECOND_FROBENIUS = 0, ZY_NS_PRECOND_AOL = 1 } zy_ns_precond;
extern const char *const zy_ns_precond_names[]; /* "frobenius", "aol", NULL */

/* The last interval minimax schedules aim at: [1 - NS_MINIMAX_SPREAD, 1 + NS_MINIMAX_SPREAD]. */
#define NS_MINIMAX_SPREAD 0.3
#define NS_MINIMAX_SAFETY 1.05

/* abc[steps][3]: (a, b, c) of each iteration. */
void ns_coefficients(zy_ns_coefs kind, int steps, float (*abc)[3]);
/* The smallest normalised singular value a minimax schedule of `steps` iterations maps into the
 * last interval (its starting l). */
double ns_minimax_lower(int steps);

#endif
