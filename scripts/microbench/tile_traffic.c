/* What an x86-64 core with AVX-512 sustains between L1 and L2 under a register-tiled matmul,
 * in core cycles: the figures behind the lead on dense kernels in issue 24's notes.
 *
 * 0. FMA throughput, twelve independent chains of 512-bit and of 256-bit FMAs: whether the core
 *    has two 512-bit FMA pipes (2 a cycle at both widths) or one (1 at 512 bits).
 * 1. Read bandwidth by buffer size (512-bit loads, summed): L1, L2, L3 and DRAM as the buffer
 *    outgrows each level.
 * 2. One 64x512 output tile of a 128x768 by 768x3072 matmul in the loop order of MetaSchedule's
 *    best schedules of BERT's dense layers: for k0: for 8-row block: for 32-column block:
 *    eight rows by two zmm accumulators are loaded from C, updated over `k inner` values of k
 *    (two loads of B, eight broadcasts of A, sixteen FMAs each) and stored back. Every block
 *    moves 16 lines of C in and 16 dirty lines out while it runs 16 * k_inner FMAs, so short
 *    k loops over a C tile larger than L1 are bound by L1-L2 traffic, not by the FMA ports
 *    (0.5 cycles per FMA at two 512-bit FMAs a cycle). Row strides of B and C are 3072 floats
 *    (12 KiB: every row in the same L1 sets) or padded by 16.
 *
 * Build and run on the machine to describe, idle (record its lscpu beside the output):
 *
 *     gcc -O2 -march=x86-64-v4 scripts/microbench/tile_traffic.c -o /tmp/tile_traffic && /tmp/tile_traffic
 *
 * The clock (fma_clock.h) is a chain of dependent 512-bit FMAs, taken as 4 cycles each (Zen 4's
 * and Golden Cove's FMA latency). Each figure is the best of five runs.
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>

#include "fma_clock.h"

static float *A, *B, *C;

#define FMA12(T, fmadd)                                                                         \
  a0 = fmadd(a0, b, c); a1 = fmadd(a1, b, c); a2 = fmadd(a2, b, c); a3 = fmadd(a3, b, c);       \
  a4 = fmadd(a4, b, c); a5 = fmadd(a5, b, c); a6 = fmadd(a6, b, c); a7 = fmadd(a7, b, c);       \
  a8 = fmadd(a8, b, c); a9 = fmadd(a9, b, c); a10 = fmadd(a10, b, c); a11 = fmadd(a11, b, c);   \
  __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5), "+v"(a6), \
                   "+v"(a7), "+v"(a8), "+v"(a9), "+v"(a10), "+v"(a11))

/* Time-stamp ticks for `n` rounds of twelve independent FMAs of 512 (wide) or 256 bits. */
__attribute__((noinline)) static double fma_ticks(long n, int wide) {
  double t = ticks();
  if (wide) {
    __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    __m512 a0 = b, a1 = b, a2 = b, a3 = b, a4 = b, a5 = b, a6 = b, a7 = b, a8 = b, a9 = b, a10 = b, a11 = b;
    for (long i = 0; i < n; i++) { FMA12(__m512, _mm512_fmadd_ps); }
    volatile float keep = _mm512_reduce_add_ps(_mm512_add_ps(a0, a11)); (void)keep;
  } else {
    __m256 b = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    __m256 a0 = b, a1 = b, a2 = b, a3 = b, a4 = b, a5 = b, a6 = b, a7 = b, a8 = b, a9 = b, a10 = b, a11 = b;
    for (long i = 0; i < n; i++) { FMA12(__m256, _mm256_fmadd_ps); }
    volatile float keep = a0[0] + a11[0]; (void)keep;
  }
  return ticks() - t;
}

static double read_bytes_per_tick(const float *p, long bytes) {
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  long floats = bytes / 4, reps = (1L << 31) / bytes;
  if (reps < 1) reps = 1;
  double best = 1e300;
  for (int q = 0; q < 5; q++) {
    double t = ticks();
    for (long r = 0; r < reps; r++)
      for (long i = 0; i < floats; i += 64) {
        s0 = _mm512_add_ps(s0, _mm512_load_ps(p + i)); s1 = _mm512_add_ps(s1, _mm512_load_ps(p + i + 16));
        s2 = _mm512_add_ps(s2, _mm512_load_ps(p + i + 32)); s3 = _mm512_add_ps(s3, _mm512_load_ps(p + i + 48));
      }
    t = ticks() - t;
    if (t < best) best = t;
  }
  volatile float keep = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
  (void)keep;
  return (double)reps * bytes / best;
}

__attribute__((noinline)) static double tile(long ld, int k_inner, int row_blocks, int col_blocks) {
  double t = ticks();
  for (int k0 = 0; k0 < 768 / k_inner; k0++)
    for (int rb = 0; rb < row_blocks; rb++)
      for (int cb = 0; cb < col_blocks; cb++) {
        float *c = C + rb * 8 * ld + cb * 32;
        __m512 acc[8][2];
        for (int r = 0; r < 8; r++) {
          acc[r][0] = _mm512_loadu_ps(c + r * ld);
          acc[r][1] = _mm512_loadu_ps(c + r * ld + 16);
        }
        for (int k1 = 0; k1 < k_inner; k1++) {
          int k = k0 * k_inner + k1;
          const float *b = B + k * ld + cb * 32;
          __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
          const float *a = A + rb * 8 * 768 + k;
#pragma GCC unroll 8
          for (int r = 0; r < 8; r++) {
            __m512 x = _mm512_set1_ps(a[r * 768]);
            acc[r][0] = _mm512_fmadd_ps(x, b0, acc[r][0]);
            acc[r][1] = _mm512_fmadd_ps(x, b1, acc[r][1]);
          }
        }
        for (int r = 0; r < 8; r++) {
          _mm512_storeu_ps(c + r * ld, acc[r][0]);
          _mm512_storeu_ps(c + r * ld + 16, acc[r][1]);
        }
      }
  return ticks() - t;
}

int main(void) {
  long big = 1L << 30;
  float *buf = aligned_alloc(4096, big);
  for (long i = 0; i < big / 4; i++) buf[i] = 1.0f;
  A = aligned_alloc(4096, 128 * 768 * 4L);
  B = aligned_alloc(4096, 768 * 3088 * 4L);
  C = aligned_alloc(4096, 128 * 3088 * 4L);
  for (long i = 0; i < 128 * 768L; i++) A[i] = 1e-3f;
  for (long i = 0; i < 768 * 3088L; i++) B[i] = 1e-3f;
  for (long i = 0; i < 128 * 3088L; i++) C[i] = 0.0f;
  double tpc = ticks_per_cycle(10000000);
  printf("time-stamp ticks per core cycle: %.3f\n", tpc);
  for (int wide = 1; wide >= 0; wide--) {
    double best = 1e300;
    for (int q = 0; q < 5; q++) {
      double t = fma_ticks(10000000, wide);
      if (t < best) best = t;
    }
    printf("%d-bit FMAs, twelve chains: %.2f a cycle\n", wide ? 512 : 256, 12.0 * 10000000 / (best / tpc));
  }
  printf("read bandwidth, bytes per core cycle:");
  long sizes[] = {16L << 10, 512L << 10, 1536L << 10, 8L << 20, 64L << 20, 1L << 30};
  const char *names[] = {"16 KiB", "512 KiB", "1.5 MiB", "8 MiB", "64 MiB", "1 GiB"};
  for (int s = 0; s < 6; s++) printf("  %s %.1f", names[s], read_bytes_per_tick(buf, sizes[s]) * tpc);
  printf("\n");
  int shapes[][3] = {{8, 16, 4}, {8, 16, 12}, {8, 16, 48}, {2, 4, 4}, {2, 4, 12}, {2, 4, 48}};
  for (int j = 0; j < 6; j++) {
    int rows = shapes[j][0], cols = shapes[j][1], k_inner = shapes[j][2];
    long fmas = (long)rows * 8 * cols * 32 * 768 / 16;
    printf("C tile %2d x %3d (%3d KiB), k inner %2d: cycles per FMA", rows * 8, cols * 32, rows * cols * 8 * 32 * 4 / 1024, k_inner);
    for (int pad = 0; pad <= 16; pad += 16) {
      tile(3072 + pad, k_inner, rows, cols);
      double best = 1e300;
      for (int q = 0; q < 5; q++) {
        double t = tile(3072 + pad, k_inner, rows, cols);
        if (t < best) best = t;
      }
      printf("  row stride %d: %.2f", 3072 + pad, best / tpc / fmas);
    }
    printf("\n");
  }
  return 0;
}
