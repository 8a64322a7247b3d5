/* The core clock of the microbenchmarks here, from a chain of dependent 512-bit FMAs taken as
 * 4 cycles each (Zen 4's FMA latency): the time-stamp counter ticks at a fixed rate that is
 * not the core's clock. Included by the .c files beside it (gcc finds it there). */
#ifndef TUNA_FMA_CLOCK_H
#define TUNA_FMA_CLOCK_H

#include <immintrin.h>
#include <x86intrin.h>

static double ticks(void) { return (double)__rdtsc(); }

/* Time-stamp ticks per core cycle, over `iterations` of four chained FMAs. */
__attribute__((noinline)) static double ticks_per_cycle(long iterations) {
  __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(0.999999f), c = _mm512_setzero_ps();
  double t = ticks();
  for (long i = 0; i < iterations; i++) {
    a = _mm512_fmadd_ps(a, b, c); a = _mm512_fmadd_ps(a, b, c);
    a = _mm512_fmadd_ps(a, b, c); a = _mm512_fmadd_ps(a, b, c);
  }
  t = ticks() - t;
  volatile float keep = _mm512_reduce_add_ps(a); (void)keep;
  return t / (16.0 * iterations);
}

#endif
