/* base/clock.h: monotonic and wall clocks. */
#ifndef WEIR_CLOCK_H
#define WEIR_CLOCK_H

#include <stdint.h>

/* Monotonic nanoseconds since an arbitrary origin; never goes back. */
uint64_t weir_clock_mono_ns(void);
/* CPU time the calling thread has used, in nanoseconds (0 where the system
 * cannot say). A system call on some systems: for coarse accounting, not
 * per record. */
uint64_t weir_clock_thread_cpu_ns(void);
/* Wall-clock milliseconds since the Unix epoch (may jump). */
int64_t weir_clock_wall_ms(void);
/* Sleeps the calling thread; only for tests, benchmarks and CLI pacing. */
void weir_sleep_us(uint64_t us);

#endif
