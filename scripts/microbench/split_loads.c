/* What a vector load that crosses a 64-byte cache line costs, in core cycles, against the same
 * loads aligned.
 *
 * Asked by MobileNetV2's pointwise convolutions on the Zen 3 guest (BENCHMARKS.md, "Zen 3's
 * sixth held-out set"): kernels loading 8 floats at a time with 40% fewer predicted cycles ran
 * no faster than a 4-float kernel; a 32-byte load whose row starts at an odd float crosses a line
 * every other time. Loops, all from a 16 KiB buffer that stays in L1:
 *  - 8 independent 256-bit loads an iteration, 32 bytes apart, into 8 independent integer sums, starting
 *    0, 1, 4 or 8 floats past a line (0 and 8: no load crosses a line; 1 and 4: every other one);
 *  - a pointwise-convolution step: 4 256-bit loads and 4 FMAs with one broadcast an iteration,
 *    starting 0 or 1 float past a line (1: two of the four loads cross). Aligned it is bound by
 *    the two FMA pipes (2 cycles); if a crossing load takes two of the two 256-bit load slots a
 *    cycle, the loads bind it at 3.
 * Build and run on the machine to describe (record its lscpu beside the output):
 *
 *     gcc -O2 -march=x86-64-v3 scripts/microbench/split_loads.c -o /tmp/split && /tmp/split
 */
#include <immintrin.h>
#include <stdio.h>

#include "fma_clock.h"

/* The sum of a 256-bit vector's lanes (vec.h's vec_sum is 512-bit where the build has AVX-512). */
static float sum8(__m256 v) {
  float f[8];
  _mm256_storeu_ps(f, v);
  return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
}

#define N 4000000L
static float buf[4096 + 64] __attribute__((aligned(64)));
static int start;

/* Ticks an iteration of 8 256-bit loads into 8 independent integer sums (integer adds: three
 * vector pipes take them, so that the loads, not the adds, bound the loop). */
__attribute__((noinline)) static double ymm_loads(void) {
  __m256i s0 = _mm256_setzero_si256(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0, s7 = s0;
  double t = ticks();
  for (long i = 0; i < N; i++) {
    const __m256i *p = (const __m256i *)(buf + ((i * 64) & 4095) + start);
    s0 = _mm256_add_epi32(s0, _mm256_loadu_si256(p)); s1 = _mm256_add_epi32(s1, _mm256_loadu_si256(p + 1));
    s2 = _mm256_add_epi32(s2, _mm256_loadu_si256(p + 2)); s3 = _mm256_add_epi32(s3, _mm256_loadu_si256(p + 3));
    s4 = _mm256_add_epi32(s4, _mm256_loadu_si256(p + 4)); s5 = _mm256_add_epi32(s5, _mm256_loadu_si256(p + 5));
    s6 = _mm256_add_epi32(s6, _mm256_loadu_si256(p + 6)); s7 = _mm256_add_epi32(s7, _mm256_loadu_si256(p + 7));
  }
  t = ticks() - t;
  __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(s0, s1), _mm256_add_epi32(s2, s3)),
                               _mm256_add_epi32(_mm256_add_epi32(s4, s5), _mm256_add_epi32(s6, s7)));
  volatile float keep = sum8(_mm256_castsi256_ps(s));
  (void)keep;
  return t / N;
}

/* One pointwise-convolution step: a broadcast and 4 256-bit loads into 4 FMAs on accumulators
 * A0..A3. */
#define STEP(k, A0, A1, A2, A3)                                              \
  {                                                                          \
    const float *p = buf + (((i + k) * 32) & 4095) + start;                  \
    __m256 x = _mm256_broadcast_ss(buf + 4096 + k);                          \
    A0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(p), A0);                         \
    A1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(p + 8), A1);                     \
    A2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(p + 16), A2);                    \
    A3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(p + 24), A3);                    \
  }

/* Ticks a pointwise-convolution step, the steps rotating over 12 accumulators (three steps) so
 * that no FMA waits on the one before. */
__attribute__((noinline)) static double fma_step(void) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0,
         a8 = a0, a9 = a0, a10 = a0, a11 = a0;
  double t = ticks();
  for (long i = 0; i < N; i += 3) {
    STEP(0, a0, a1, a2, a3)
    STEP(1, a4, a5, a6, a7)
    STEP(2, a8, a9, a10, a11)
  }
  t = ticks() - t;
  __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)),
                           _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7)));
  s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));
  volatile float keep = sum8(s);
  (void)keep;
  return t / N;
}

int main(void) {
  for (int i = 0; i < 4096 + 64; i++) buf[i] = 1e-3f * (i & 1023);
  double tpc = ticks_per_cycle(20000000);
  printf("time-stamp ticks per core cycle: %.3f\n", tpc);
  for (int rep = 0; rep < 3; rep++) {
    printf("8 ymm loads an iteration, first at float");
    for (int s = 0; s < 4; s++) {
      start = (int[]){0, 1, 4, 8}[s];
      printf(" %d: %.2f;", start, ymm_loads() / tpc);
    }
    printf(" pointwise step (4 ymm loads, 4 FMAs), first at float");
    for (start = 0; start < 2; start++) printf(" %d: %.2f;", start, fma_step() / tpc);
    printf("\n");
  }
  return 0;
}
