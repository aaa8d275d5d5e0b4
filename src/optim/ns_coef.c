/* Newton-Schulz coefficient schedules (ns_coef.h). Everything in double: a few thousand 4 x 4
 * solves per schedule, made once when the optimiser is planned. */
#include "optim/ns_coef.h"

#include <math.h>
#include <string.h>

const char *const zy_ns_coefs_names[] = {"fixed", "minimax", NULL};
const char *const zy_ns_precond_names[] = {"frobenius", "aol", NULL};

static const double FIXED[3] = {3.4445, -4.7750, 2.0315};
/* The quintic with p(1) = 1 and p'(1) = p''(1) = 0, where an interval has shrunk to a point. */
static const double CONVERGED[3] = {15.0 / 8.0, -10.0 / 8.0, 3.0 / 8.0};
/* The smallest starting l: from about 6 iterations on, l = L_FLOOR and the last interval is
 * narrower than [1 - NS_MINIMAX_SPREAD, 1 + NS_MINIMAX_SPREAD]. Lower starts need first quintics
 * whose interior values cancel to ~8 l, which float coefficients no longer hold. */
#define L_FLOOR 1e-4
/* An interval this narrow (hi / lo - 1) is taken as converged: the Remez system's conditioning
 * goes as its width^-3. */
#define CONVERGED_WIDTH 1e-4

static double quintic(const double k[3], double x) {
    const double x2 = x * x;
    return x * (k[0] + x2 * (k[1] + x2 * k[2]));
}

/* Solves the 4 x 4 system m x = r (partial pivoting); 0 when singular. */
static int solve4(double m[4][5], double x[4]) {
    for (int c = 0; c < 4; c++) {
        int p = c;
        for (int i = c + 1; i < 4; i++)
            if (fabs(m[i][c]) > fabs(m[p][c])) p = i;
        if (m[p][c] == 0.0) return 0;
        if (p != c)
            for (int j = 0; j < 5; j++) {
                const double t = m[c][j];
                m[c][j] = m[p][j], m[p][j] = t;
            }
        for (int i = c + 1; i < 4; i++) {
            const double f = m[i][c] / m[c][c];
            for (int j = c; j < 5; j++) m[i][j] -= f * m[c][j];
        }
    }
    for (int i = 3; i >= 0; i--) {
        double s = m[i][4];
        for (int j = i + 1; j < 4; j++) s -= m[i][j] * x[j];
        x[i] = s / m[i][i];
    }
    return 1;
}

/* The positive critical points of x -> quintic(k, x): roots of k0 + 3 k1 x^2 + 5 k2 x^4; returns
 * how many (0-2), ascending. */
static int critical_points(const double k[3], double r[2]) {
    const double disc = 9 * k[1] * k[1] - 20 * k[0] * k[2];
    int n = 0;
    if (disc < 0 || k[2] == 0.0) return 0;
    const double t[2] = {(-3 * k[1] - sqrt(disc)) / (10 * k[2]),
                         (-3 * k[1] + sqrt(disc)) / (10 * k[2])};
    for (int i = 0; i < 2; i++)
        if (t[i] > 0) r[n++] = sqrt(t[i]);
    if (n == 2 && r[0] > r[1]) {
        const double s = r[0];
        r[0] = r[1], r[1] = s;
    }
    return n;
}

/* k: the odd quintic closest to 1 on [lo, hi] in the max norm (Remez exchange). */
static void minimax_quintic(double lo, double hi, double k[3]) {
    memcpy(k, CONVERGED, sizeof CONVERGED); /* also what a singular first solve leaves */
    if (hi / lo < 1.0 + CONVERGED_WIDTH) return;
    /* the error's extremes crowd towards lo when lo is small: start them spread geometrically */
    double pts[4] = {lo, lo * pow(hi / lo, 0.33), lo * pow(hi / lo, 0.75), hi};
    for (int it = 0; it < 100; it++) {
        double m[4][5], x[4];
        for (int i = 0; i < 4; i++) {
            const double p = pts[i];
            m[i][0] = p, m[i][1] = p * p * p, m[i][2] = p * p * p * p * p;
            m[i][3] = (i % 2) ? -1.0 : 1.0, m[i][4] = 1.0;
        }
        if (!solve4(m, x)) break;
        k[0] = x[0], k[1] = x[1], k[2] = x[2];
        double r[2];
        if (critical_points(k, r) != 2 || !(lo < r[0] && r[1] < hi)) break;
        const double moved = fmax(fabs(r[0] - pts[1]), fabs(r[1] - pts[2]));
        pts[1] = r[0], pts[2] = r[1];
        if (moved <= 1e-15 * hi) break;
    }
}

/* The range of x -> quintic(k, x) over [lo, hi]: its ends and interior critical points. */
static void range_on(const double k[3], double lo, double hi, double *mn, double *mx) {
    double r[2];
    const int n = critical_points(k, r);
    *mn = fmin(quintic(k, lo), quintic(k, hi));
    *mx = fmax(quintic(k, lo), quintic(k, hi));
    for (int i = 0; i < n; i++)
        if (lo < r[i] && r[i] < hi) {
            const double v = quintic(k, r[i]);
            *mn = fmin(*mn, v), *mx = fmax(*mx, v);
        }
}

/* The greedy schedule from [l, 1]: coefficients (guarded by the safety factor) into k (may be
 * NULL); returns the last interval's lower end. */
static double greedy(double l, int steps, double (*k)[3]) {
    double lo = l, hi = 1.0;
    for (int t = 0; t < steps; t++) {
        double p[3];
        minimax_quintic(lo, hi, p);
        const double S = NS_MINIMAX_SAFETY; /* q(x) = p(x / S) */
        const double q[3] = {p[0] / S, p[1] / (S * S * S), p[2] / (S * S * S * S * S)};
        if (k) memcpy(k[t], q, sizeof q);
        range_on(q, lo, hi, &lo, &hi);
    }
    return lo;
}

double ns_minimax_lower(int steps) {
    /* the last interval's lower end rises with l: bisect log l for 1 - NS_MINIMAX_SPREAD */
    const double target = 1.0 - NS_MINIMAX_SPREAD;
    if (greedy(L_FLOOR, steps, NULL) >= target) return L_FLOOR;
    double a = log(L_FLOOR), b = 0.0;
    for (int i = 0; i < 80; i++) {
        const double mid = 0.5 * (a + b);
        if (greedy(exp(mid), steps, NULL) >= target)
            b = mid;
        else
            a = mid;
    }
    return exp(b);
}

void ns_coefficients(zy_ns_coefs kind, int steps, float (*abc)[3]) {
    if (kind == ZY_NS_MINIMAX) {
        double k[steps][3];
        greedy(ns_minimax_lower(steps), steps, k);
        for (int t = 0; t < steps; t++)
            for (int j = 0; j < 3; j++) abc[t][j] = (float)k[t][j];
        return;
    }
    for (int t = 0; t < steps; t++)
        for (int j = 0; j < 3; j++) abc[t][j] = (float)FIXED[j];
}
