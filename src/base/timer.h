/* Wall-clock timing on the monotonic clock. */
#ifndef ZY_TIMER_H
#define ZY_TIMER_H

#ifdef __cplusplus
extern "C" {
#endif

/* Seconds since an arbitrary fixed point (CLOCK_MONOTONIC). */
double zy_now(void);

#ifdef __cplusplus
}
#endif

#endif
