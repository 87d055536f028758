/* spin.h: the pause hint for short busy-waits (a worker's spin before it
 * sleeps, a state owner waiting out a snapshot reader's page). */
#ifndef WEIR_SPIN_H
#define WEIR_SPIN_H

static inline void weir__cpu_relax(void) {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#elif defined(__aarch64__)
  __asm__ volatile("yield");
#endif
}

#endif
