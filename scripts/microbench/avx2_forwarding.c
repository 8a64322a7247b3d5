/* Store forwarding on an x86-64 core with AVX2 but no AVX-512, in core cycles: which loads take
 * their data from the store queue after 256-bit stores, plain and masked (VMASKMOVPS), and what
 * accumulator rows that LLVM moves as 8 lanes plus a masked tail cost when they lie close.
 *
 * Asked by Zen 3 (the `zen3` preset borrowed Zen 4's forwarding figures, which
 * zen4_memory.c measured with 512-bit stores that need AVX-512) and by the MobileNetV2 projection
 * convolutions whose 14-float accumulator rows LLVM stores as 8 lanes and 6 masked lanes.
 * Loops, all in a buffer that stays in L1:
 *  - forwarding: two 32-byte stores, then one load of B bytes at +O from the first; the loaded
 *    value feeds an accumulator, not the next stores (forwarded: a few cycles an iteration);
 *  - the same after one masked store (6 of 8 lanes) in place of the first plain one;
 *  - rows: two accumulator rows updated by a chain of six FMAs and stored back each iteration,
 *    the pointer moving on two rows: 8-float rows (plain), 16-float rows (two plain vectors),
 *    and 14-float rows as LLVM stores them, 8 lanes plus 6 masked (the first row's masked load
 *    then reads past its mask into the second row's plain store, and the next iteration's
 *    first load overlaps the second row's masked store in lanes it left off), and the same
 *    14 floats in 16-float rows (no overlap);
 *  - rows in place: eight 14-float rows kept in memory across a reduction loop, each updated as
 *    8 lanes plus 6 masked every iteration at the same addresses, 14 floats apart (each row's
 *    accesses overlap its neighbours' in lanes the mask leaves off) or 16 apart (no overlap),
 *    and the same with plain 8-lane accesses in place of the masked ones; and the masked rows a
 *    pair at a time, as LLVM orders a 2-row tile (both rows' 8 lanes, then both rows' masked
 *    lanes), so that a masked load follows the next row's plain store over lanes it leaves off;
 *  - a load that waits for a store, then k masked stores independent of it: whether their 12
 *    cycles each run while the load waits or after it.
 * Build and run on the machine to describe (record its lscpu beside the output):
 *
 *     gcc -O2 -march=x86-64-v3 scripts/microbench/avx2_forwarding.c -o /tmp/fwd && /tmp/fwd
 */
#include <immintrin.h>
#include <stdio.h>

#include "fma_clock.h"

#define N 2000000L
static float slots[64] __attribute__((aligned(64)));
static float rows[4096 + 64] __attribute__((aligned(64)));
static __m256i tail;  /* 6 of 8 lanes on */

/* Two 32-byte stores (the first masked when `masked`), then a load of `bytes` at `offset`. */
__attribute__((noinline)) static double forwarding(int bytes, int offset, int masked) {
  __m256 v = _mm256_set1_ps(1.0f), w = _mm256_set1_ps(2.0f), acc = _mm256_setzero_ps();
  char *p = (char *)slots;
  double t = ticks();
  for (long i = 0; i < N; i++) {
    if (masked) _mm256_maskstore_ps((float *)p, tail, v);
    else _mm256_storeu_ps((float *)p, v);
    _mm256_storeu_ps((float *)(p + 32), w);
    __m256 r;
    if (bytes == 32) r = _mm256_loadu_ps((float *)(p + offset));
    else if (bytes == 16) r = _mm256_castps128_ps256(_mm_loadu_ps((float *)(p + offset)));
    else if (bytes == 8) r = _mm256_castpd_ps(_mm256_castpd128_pd256(_mm_load_sd((double *)(p + offset))));
    else r = _mm256_set1_ps(*(float *)(p + offset));
    acc = _mm256_add_ps(acc, r);
    __asm__ volatile("" ::: "memory");
  }
  t = ticks() - t;
  volatile float keep = acc[0] + acc[7]; (void)keep;
  return t / N;
}

#define SIX_FMAS(a)                                                                        \
  a = _mm256_fmadd_ps(a, w0, w1); a = _mm256_fmadd_ps(a, w0, w1);                           \
  a = _mm256_fmadd_ps(a, w0, w1); a = _mm256_fmadd_ps(a, w0, w1);                           \
  a = _mm256_fmadd_ps(a, w0, w1); a = _mm256_fmadd_ps(a, w0, w1);

/* Two rows an iteration, `row` floats apart, moved on by two rows: `kind` 0: one plain vector
 * a row; 1: two plain vectors; 2: 8 lanes plus a masked tail of 6 (loaded and stored masked). */
__attribute__((noinline)) static double moving_rows(int row, int kind) {
  __m256 w0 = _mm256_set1_ps(0.5f), w1 = _mm256_set1_ps(0.25f);
  long span = 4096 / (2 * row) * (2 * row);
  long at = 0;
  double t = ticks();
  for (long i = 0; i < N; i++) {
    float *p = rows + at, *q = p + row;
    __m256 a = _mm256_loadu_ps(p), b = _mm256_loadu_ps(q);
    SIX_FMAS(a) SIX_FMAS(b)
    _mm256_storeu_ps(p, a); _mm256_storeu_ps(q, b);
    if (kind) {
      __m256 c = kind == 1 ? _mm256_loadu_ps(p + 8) : _mm256_maskload_ps(p + 8, tail);
      __m256 d = kind == 1 ? _mm256_loadu_ps(q + 8) : _mm256_maskload_ps(q + 8, tail);
      SIX_FMAS(c) SIX_FMAS(d)
      if (kind == 1) { _mm256_storeu_ps(p + 8, c); _mm256_storeu_ps(q + 8, d); }
      else { _mm256_maskstore_ps(p + 8, tail, c); _mm256_maskstore_ps(q + 8, tail, d); }
    }
    at += 2 * row;
    if (at >= span) at = 0;
  }
  t = ticks() - t;
  return t / N;
}

/* Eight rows of 14 floats kept in memory across a reduction loop, `row` floats apart, updated
 * in place every iteration (one FMA each), as LLVM moves them: 8 lanes with a plain load and
 * store, then the other 6 with masked ones (`masked`; else plain 8-lane ones, as for 16 floats).
 * With 14-float rows, a row's 8-lane load overlaps the previous row's masked store in lanes the
 * mask leaves off, and its masked load the next row's plain store likewise. */
#define ROW(k)                                                                             \
  { float *p = rows + (k) * row;                                                           \
    _mm256_storeu_ps(p, _mm256_fmadd_ps(x, w, _mm256_loadu_ps(p)));                        \
    if (masked) _mm256_maskstore_ps(p + 8, tail, _mm256_fmadd_ps(x, w, _mm256_maskload_ps(p + 8, tail))); \
    else _mm256_storeu_ps(p + 8, _mm256_fmadd_ps(x, w, _mm256_loadu_ps(p + 8))); }

__attribute__((noinline)) static double rows_in_place(int row, int masked) {
  __m256 x = _mm256_set1_ps(0.999f), w = _mm256_set1_ps(1e-3f);
  double t = ticks();
  for (long i = 0; i < N / 4; i++) {
    ROW(0) ROW(1) ROW(2) ROW(3) ROW(4) ROW(5) ROW(6) ROW(7)
    __asm__ volatile("" ::: "memory");
  }
  t = ticks() - t;
  return 4 * t / N;
}

/* The same eight rows, updated a pair at a time as LLVM orders a 2-row tile: both rows' 8-lane
 * parts (load, FMA, store), then both rows' masked parts, so that the first row's masked load
 * comes after the second row's plain store, whose first lanes the load's mask leaves off. */
#define PAIR(k)                                                                            \
  { float *p = rows + (k) * row, *q = p + row;                                             \
    __m256 a = _mm256_fmadd_ps(x, w, _mm256_loadu_ps(p)), b = _mm256_fmadd_ps(x, w, _mm256_loadu_ps(q)); \
    _mm256_storeu_ps(p, a); _mm256_storeu_ps(q, b);                                        \
    a = _mm256_fmadd_ps(x, w, _mm256_maskload_ps(p + 8, tail));                            \
    b = _mm256_fmadd_ps(x, w, _mm256_maskload_ps(q + 8, tail));                            \
    _mm256_maskstore_ps(p + 8, tail, a); _mm256_maskstore_ps(q + 8, tail, b); }

__attribute__((noinline)) static double row_pairs_in_place(int row) {
  __m256 x = _mm256_set1_ps(0.999f), w = _mm256_set1_ps(1e-3f);
  double t = ticks();
  for (long i = 0; i < N / 4; i++) {
    PAIR(0) PAIR(2) PAIR(4) PAIR(6)
    __asm__ volatile("" ::: "memory");
  }
  t = ticks() - t;
  return 4 * t / N;
}

/* A load that waits for a store (32 bytes at +4 of a 32-byte store) feeding an accumulator, and
 * then `k` masked stores of values that do not depend on it, elsewhere: whether the masked
 * stores' 12 cycles each run while the load waits (max of the two) or after it (the sum). */
__attribute__((noinline)) static double wait_then_masked(int k) {
  __m256 v = _mm256_set1_ps(1.0f), acc = _mm256_setzero_ps();
  float *p = slots, *q = rows + 1024;
  double t = ticks();
  for (long i = 0; i < N; i++) {
    _mm256_storeu_ps(p, v);
    acc = _mm256_add_ps(acc, _mm256_loadu_ps(p + 1));
    for (int j = 0; j < k; j++) _mm256_maskstore_ps(q + 8 * j, tail, v);
    __asm__ volatile("" ::: "memory");
  }
  t = ticks() - t;
  volatile float keep = acc[0] + acc[7]; (void)keep;
  return t / N;
}

/* Ticks of one measurement in core cycles, the clock read again right after it: the core's
 * frequency moves (boost, other load) while the time-stamp counter's does not. */
static double CYCLES(double ticks_taken) { return ticks_taken / ticks_per_cycle(N); }

int main(void) {
  for (int i = 0; i < 4096 + 64; i++) rows[i] = 0.001f * (i & 255);
  int lanes[8] = {-1, -1, -1, -1, -1, -1, 0, 0};
  tail = _mm256_loadu_si256((const __m256i *)lanes);
  printf("time-stamp ticks per core cycle: %.3f\n", ticks_per_cycle(N));
  int widths[] = {32, 16, 8, 4};
  for (int masked = 0; masked < 2; masked++) {
    printf("store forwarding: cycles an iteration, load of B bytes at offset +O from two 32-byte stores%s\n",
           masked ? " (the first masked, 6 of 8 lanes: bytes 0-23 written)" : "");
    for (int k = 0; k < 4; k++) {
      printf("  B=%2d:", widths[k]);
      for (int off = 0; off <= 32; off += 4) printf(" +%d:%.0f", off, CYCLES(forwarding(widths[k], off, masked)));
      printf("\n");
    }
  }
  printf("two accumulator rows through a moving pointer (six FMAs a vector), cycles an iteration: "
         "8-float rows %.1f; 16-float rows, 2 vectors %.1f; 16-float rows, 8 + 6 masked %.1f; "
         "14-float rows, 8 + 6 masked %.1f\n",
         CYCLES(moving_rows(8, 0)), CYCLES(moving_rows(16, 1)), CYCLES(moving_rows(16, 2)), CYCLES(moving_rows(14, 2)));
  printf("eight rows in memory updated in place (8 lanes, then 6 masked or 8 plain), cycles an iteration: "
         "14 floats apart, masked %.1f; 16 apart, masked %.1f; 14 apart, plain %.1f; 16 apart, plain %.1f\n",
         CYCLES(rows_in_place(14, 1)), CYCLES(rows_in_place(16, 1)), CYCLES(rows_in_place(14, 0)),
         CYCLES(rows_in_place(16, 0)));
  printf("the same rows a pair at a time (both 8-lane parts, then both masked parts), cycles an iteration: "
         "14 floats apart %.1f; 16 apart %.1f\n", CYCLES(row_pairs_in_place(14)), CYCLES(row_pairs_in_place(16)));
  printf("a load that waits for a store, then k independent masked stores, cycles an iteration:");
  for (int k = 0; k <= 4; k++) printf(" k=%d: %.1f", k, CYCLES(wait_then_masked(k)));
  printf("\n");
  return 0;
}
