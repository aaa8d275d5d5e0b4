/* Wall-clock timing on the monotonic clock. */
#ifndef ZY_TIMER_H
#define ZY_TIMER_H

/* Seconds since an arbitrary fixed point (CLOCK_MONOTONIC). */
double zy_now(void);

#endif
