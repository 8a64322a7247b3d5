/* Whether AVX2 masked loads (VMASKMOVPS ymm, ymm, m256) cost more than plain loads, in core cycles.
 *
 * Checked on the Zen 3 guest when LLVM's padded-row loads of a MobileNetV2 depthwise conv2d
 * (27 masked loads in a 175-instruction loop) ran 2.5x slower than tuna predicted
 * (BENCHMARKS.md, "Copy loops unrolled by LLVM"). Two loops:
 *  - throughput: 8 loads an iteration (each one float off a 32-byte boundary) into 8 independent
 *    sums, plain or masked (all lanes, 6 of 8, none);
 *  - stores before loads: each iteration stores 16 floats and loads 16 (7 of them overlapping
 *    the previous iteration's stores in address bits 11:0), with the loaded and the stored
 *    buffers 256 KiB apart (4 KiB aliasing) or 256 KiB + 2 KiB apart.
 * Build and run on the machine to describe (record its lscpu beside the output):
 *
 *     gcc -O2 -march=x86-64-v3 scripts/microbench/avx2_masked_loads.c -o /tmp/masked && /tmp/masked
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>

#include "fma_clock.h"

#define N 2000000L
static float buf[4096] __attribute__((aligned(64)));
static float *in, *out;
static __m256i mask;

#define PLAIN(p) _mm256_loadu_ps(p)
#define MASKED(p) _mm256_maskload_ps((p), mask)

/* Ticks an iteration of 8 loads into 8 independent sums. */
#define SUMS(name, LOAD)                                                                  \
  __attribute__((noinline)) static double name(void) {                                    \
    __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0,  \
           s7 = s0;                                                                       \
    double t = ticks();                                                                   \
    for (long i = 0; i < N; i++) {                                                        \
      const float *p = buf + ((i * 8) & 2047) + 1;                                        \
      s0 = _mm256_add_ps(s0, LOAD(p)); s1 = _mm256_add_ps(s1, LOAD(p + 8));               \
      s2 = _mm256_add_ps(s2, LOAD(p + 16)); s3 = _mm256_add_ps(s3, LOAD(p + 24));         \
      s4 = _mm256_add_ps(s4, LOAD(p + 32)); s5 = _mm256_add_ps(s5, LOAD(p + 40));         \
      s6 = _mm256_add_ps(s6, LOAD(p + 48)); s7 = _mm256_add_ps(s7, LOAD(p + 56));         \
    }                                                                                     \
    t = ticks() - t;                                                                      \
    volatile float keep = vec_sum(_mm256_add_ps(_mm256_add_ps(_mm256_add_ps(s0, s1),      \
        _mm256_add_ps(s2, s3)), _mm256_add_ps(_mm256_add_ps(s4, s5), _mm256_add_ps(s6, s7)))); \
    (void)keep;                                                                           \
    return t / N;                                                                         \
  }

/* Ticks an iteration of 2 loads from `in` and 2 stores to `out`. */
#define STORES(name, LOAD)                                                                \
  __attribute__((noinline)) static double name(void) {                                    \
    __m256 one = _mm256_set1_ps(1.0f), acc = _mm256_setzero_ps();                          \
    double t = ticks();                                                                   \
    for (long i = 0; i < N; i++) {                                                        \
      long j = 16 + ((i * 16) & 1007);                                                    \
      __m256 a = LOAD(in + j - 7), b = LOAD(in + j + 1);                                  \
      acc = _mm256_add_ps(acc, _mm256_mul_ps(a, b));                                      \
      _mm256_storeu_ps(out + j, _mm256_add_ps(a, one));                                   \
      _mm256_storeu_ps(out + j + 8, _mm256_add_ps(b, one));                               \
    }                                                                                     \
    t = ticks() - t;                                                                      \
    volatile float keep = vec_sum(acc);                                                   \
    (void)keep;                                                                           \
    return t / N;                                                                         \
  }

SUMS(sums_plain, PLAIN)
SUMS(sums_masked, MASKED)
STORES(stores_plain, PLAIN)
STORES(stores_masked, MASKED)

int main(void) {
  for (int i = 0; i < 4096; i++) buf[i] = 1e-3f * i;
  float *mem = aligned_alloc(4096, 1 << 22);
  for (int i = 0; i < (1 << 20); i++) mem[i] = 1e-3f * (i & 1023);
  double tpc = ticks_per_cycle(20000000);
  printf("time-stamp ticks per core cycle: %.3f\n", tpc);
  int masks[3][8] = {{-1, -1, -1, -1, -1, -1, -1, -1}, {0, -1, -1, -1, -1, -1, -1, 0}, {0}};
  const char *names[3] = {"all lanes", "6 of 8 lanes", "no lane"};
  long apart[2] = {1L << 18, (1L << 18) + 2048};
  for (int rep = 0; rep < 3; rep++) {
    printf("8 plain loads an iteration: %.2f cycles;", sums_plain() / tpc);
    for (int m = 0; m < 3; m++) {
      mask = _mm256_loadu_si256((const __m256i *)masks[m]);
      printf(" masked (%s): %.2f;", names[m], sums_masked() / tpc);
    }
    printf("\n");
    mask = _mm256_loadu_si256((const __m256i *)masks[1]);
    for (int a = 0; a < 2; a++) {
      in = mem;
      out = mem + apart[a] / 4;
      printf("2 stores and 2 loads an iteration, buffers %ld bytes apart: plain %.2f, masked %.2f cycles\n",
             apart[a], stores_plain() / tpc, stores_masked() / tpc);
    }
  }
  return 0;
}
