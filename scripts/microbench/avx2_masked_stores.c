/* What AVX2 masked stores (VMASKMOVPS m256, ymm, ymm) cost, in core cycles, against plain stores:
 * alone, and as the accumulator rows of a reduction kept in memory (each row loaded, updated by
 * an FMA and stored back every iteration, so that the next iteration's load reads what the last
 * one stored).
 *
 * Asked by a MobileNetV2 projection convolution on the Zen 3 guest (BENCHMARKS.md, "Masked
 * stores on Zen 3"): a candidate whose unvectorized 14-float rows LLVM moves as 8 lanes plus 6
 * masked lanes, 16 masked stores and 28 masked loads of accumulators in a 249-instruction loop,
 * ran 6.5x slower than tuna predicted and 5.7x slower than its pool's best. Loops, all in a
 * 16 KiB buffer that stays in L1:
 *  - throughput: 8 stores an iteration, 32 bytes apart, of independent values, plain or masked
 *    (6 of 8 lanes, all lanes; and 128-bit masked stores, VMASKMOVPS m128);
 *  - accumulators in memory: 8 rows, each loaded, updated (one FMA) and stored every iteration,
 *    with plain loads and stores, with masked loads and plain stores, with plain loads and masked
 *    stores, and with both masked (6 of 8 lanes), the rows at the same addresses every
 *    iteration (as the candidate's, whose reduction loop runs around them);
 *  - overlap: one masked (or plain) store an iteration beside 24 FMAs on 12 independent
 *    accumulators (12 cycles of the two FMA pipes): whether the store's cycles add to the
 *    arithmetic's or hide under it;
 *  - line crossing: the 8 stores of the first loop starting 1 float past a 64-byte line.
 * Build and run on the machine to describe (record its lscpu beside the output):
 *
 *     gcc -O2 -march=x86-64-v3 scripts/microbench/avx2_masked_stores.c -o /tmp/mstores && /tmp/mstores
 */
#include <immintrin.h>
#include <stdio.h>

#include "fma_clock.h"

#define N 1000000L
static float buf[4096] __attribute__((aligned(64)));
static __m256i mask;
static int start;

#define PLAIN_LOAD(p) _mm256_loadu_ps(p)
#define MASKED_LOAD(p) _mm256_maskload_ps((p), mask)
#define PLAIN_STORE(p, v) _mm256_storeu_ps((p), (v))
#define MASKED_STORE(p, v) _mm256_maskstore_ps((p), mask, (v))
#define MASKED_STORE128(p, v) _mm_maskstore_ps((p), _mm256_castsi256_si128(mask), _mm256_castps256_ps128(v))

/* Ticks an iteration of 8 stores of independent values, 32 bytes apart. */
#define STORES(name, STORE)                                                               \
  __attribute__((noinline)) static double name(void) {                                    \
    __m256 v = _mm256_set1_ps(1.0f), d = _mm256_set1_ps(1e-7f);                           \
    double t = ticks();                                                                   \
    for (long i = 0; i < N; i++) {                                                        \
      float *p = buf + ((i * 64) & 2047) + start;                                         \
      v = _mm256_add_ps(v, d);                                                            \
      STORE(p, v); STORE(p + 8, v); STORE(p + 16, v); STORE(p + 24, v);                   \
      STORE(p + 32, v); STORE(p + 40, v); STORE(p + 48, v); STORE(p + 56, v);             \
    }                                                                                     \
    t = ticks() - t;                                                                      \
    return t / N;                                                                         \
  }

/* One FMA on each of the 12 accumulators a0..a11. */
#define TWELVE_FMAS                                                                       \
  a0 = _mm256_fmadd_ps(x, w, a0); a1 = _mm256_fmadd_ps(x, w, a1);                         \
  a2 = _mm256_fmadd_ps(x, w, a2); a3 = _mm256_fmadd_ps(x, w, a3);                         \
  a4 = _mm256_fmadd_ps(x, w, a4); a5 = _mm256_fmadd_ps(x, w, a5);                         \
  a6 = _mm256_fmadd_ps(x, w, a6); a7 = _mm256_fmadd_ps(x, w, a7);                         \
  a8 = _mm256_fmadd_ps(x, w, a8); a9 = _mm256_fmadd_ps(x, w, a9);                         \
  a10 = _mm256_fmadd_ps(x, w, a10); a11 = _mm256_fmadd_ps(x, w, a11);

/* Ticks an iteration of one store beside 24 independent FMAs. */
#define OVERLAP(name, STORE)                                                              \
  __attribute__((noinline)) static double name(void) {                                    \
    __m256 a0 = _mm256_set1_ps(buf[0]), a1 = _mm256_set1_ps(buf[1]),                      \
           a2 = _mm256_set1_ps(buf[2]), a3 = _mm256_set1_ps(buf[3]),                      \
           a4 = _mm256_set1_ps(buf[4]), a5 = _mm256_set1_ps(buf[5]),                      \
           a6 = _mm256_set1_ps(buf[6]), a7 = _mm256_set1_ps(buf[7]),                      \
           a8 = _mm256_set1_ps(buf[8]), a9 = _mm256_set1_ps(buf[9]),                      \
           a10 = _mm256_set1_ps(buf[10]), a11 = _mm256_set1_ps(buf[11]);                  \
    __m256 x = _mm256_set1_ps(0.999f), w = _mm256_set1_ps(1e-3f);                         \
    double t = ticks();                                                                   \
    for (long i = 0; i < N; i++) {                                                        \
      TWELVE_FMAS                                                                         \
      STORE(buf + ((i * 16) & 2047), a0);                                                 \
      TWELVE_FMAS                                                                         \
    }                                                                                     \
    t = ticks() - t;                                                                      \
    __m256 s = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)), \
                             _mm256_add_ps(_mm256_add_ps(a4, a5), _mm256_add_ps(a6, a7))); \
    s = _mm256_add_ps(s, _mm256_add_ps(_mm256_add_ps(a8, a9), _mm256_add_ps(a10, a11)));  \
    buf[4095] += s[0] + s[7];                                                             \
    return t / N;                                                                         \
  }

/* Ticks an iteration over 8 accumulator rows in memory (a row of 8 floats every 16 floats). */
#define ROWS(name, LOAD, STORE)                                                           \
  __attribute__((noinline)) static double name(void) {                                    \
    __m256 x = _mm256_set1_ps(0.999f), w = _mm256_set1_ps(1e-3f);                         \
    float *p = buf + 1024;                                                                \
    for (int k = 0; k < 128; k++) p[k] = 0.0f;                                            \
    double t = ticks();                                                                   \
    for (long i = 0; i < N; i++) {                                                        \
      STORE(p, _mm256_fmadd_ps(x, w, LOAD(p)));                                           \
      STORE(p + 16, _mm256_fmadd_ps(x, w, LOAD(p + 16)));                                 \
      STORE(p + 32, _mm256_fmadd_ps(x, w, LOAD(p + 32)));                                 \
      STORE(p + 48, _mm256_fmadd_ps(x, w, LOAD(p + 48)));                                 \
      STORE(p + 64, _mm256_fmadd_ps(x, w, LOAD(p + 64)));                                 \
      STORE(p + 80, _mm256_fmadd_ps(x, w, LOAD(p + 80)));                                 \
      STORE(p + 96, _mm256_fmadd_ps(x, w, LOAD(p + 96)));                                 \
      STORE(p + 112, _mm256_fmadd_ps(x, w, LOAD(p + 112)));                               \
      __asm__ volatile("" ::: "memory");                                                  \
    }                                                                                     \
    t = ticks() - t;                                                                      \
    return t / N;                                                                         \
  }

STORES(stores_plain, PLAIN_STORE)
STORES(stores_masked, MASKED_STORE)
STORES(stores_masked128, MASKED_STORE128)
OVERLAP(overlap_plain, PLAIN_STORE)
OVERLAP(overlap_masked, MASKED_STORE)
ROWS(rows_plain, PLAIN_LOAD, PLAIN_STORE)
ROWS(rows_masked_load, MASKED_LOAD, PLAIN_STORE)
ROWS(rows_masked_store, PLAIN_LOAD, MASKED_STORE)
ROWS(rows_masked, MASKED_LOAD, MASKED_STORE)

int main(void) {
  for (int i = 0; i < 4096; i++) buf[i] = 1e-3f * i;
  double tpc = ticks_per_cycle(20000000);
  printf("time-stamp ticks per core cycle: %.3f\n", tpc);
  int masks[2][8] = {{-1, -1, -1, -1, -1, -1, 0, 0}, {-1, -1, -1, -1, -1, -1, -1, -1}};
  const char *names[2] = {"6 of 8 lanes", "all lanes"};
  for (int rep = 0; rep < 3; rep++) {
    start = 0;
    printf("8 stores an iteration: plain %.2f cycles;", stores_plain() / tpc);
    for (int m = 0; m < 2; m++) {
      mask = _mm256_loadu_si256((const __m256i *)masks[m]);
      printf(" masked (%s) %.2f;", names[m], stores_masked() / tpc);
    }
    printf(" 128-bit masked %.2f;", stores_masked128() / tpc);
    start = 1;
    printf(" 1 float past a line: plain %.2f;", stores_plain() / tpc);
    mask = _mm256_loadu_si256((const __m256i *)masks[0]);
    printf(" masked (6 of 8 lanes) %.2f\n", stores_masked() / tpc);
    printf("1 store beside 24 independent FMAs an iteration: plain %.2f cycles; masked (6 of 8 lanes) %.2f\n",
           overlap_plain() / tpc, overlap_masked() / tpc);
    printf("8 accumulator rows in memory an iteration (load, FMA, store): plain %.2f cycles; masked load %.2f;"
           " masked store %.2f; both masked %.2f\n",
           rows_plain() / tpc, rows_masked_load() / tpc, rows_masked_store() / tpc, rows_masked() / tpc);
  }
  return 0;
}
