/* The core clock of the microbenchmarks here, from a chain of dependent FMAs of the widest vector
 * the build allows (vec.h) taken as 4 cycles each (the FMA latency of Zen 3, Zen 4 and Intel's
 * cores since Skylake): the time-stamp counter ticks at a fixed rate that is not the core's clock.
 * Included by the .c files beside it (gcc finds it there). */
#ifndef TUNA_FMA_CLOCK_H
#define TUNA_FMA_CLOCK_H

#include <x86intrin.h>

#include "vec.h"

static double ticks(void) { return (double)__rdtsc(); }

/* Time-stamp ticks per core cycle, over `iterations` of four chained FMAs. */
__attribute__((noinline)) static double ticks_per_cycle(long iterations) {
  vec_t a = vec_set1(1.0f), b = vec_set1(0.999999f), c = vec_zero();
  double t = ticks();
  for (long i = 0; i < iterations; i++) {
    a = vec_fmadd(a, b, c); a = vec_fmadd(a, b, c);
    a = vec_fmadd(a, b, c); a = vec_fmadd(a, b, c);
  }
  t = ticks() - t;
  volatile float keep = vec_sum(a); (void)keep;
  return t / (16.0 * iterations);
}

#endif
