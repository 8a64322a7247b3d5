/* Gathers, scatters and store forwarding on an x86-64 core with AVX-512, in core cycles.
 *
 * The figures behind the [here] entries of tuna/data/uarch/zen4.toml. Build and run on the
 * machine to describe (record its lscpu beside the output):
 *
 *     gcc -O2 -march=x86-64-v4 scripts/microbench/zen4_memory.c -o /tmp/zen4_memory && /tmp/zen4_memory
 *
 * The clock (fma_clock.h) is a chain of dependent 512-bit FMAs, taken as 4 cycles each (Zen 4's FMA
 * latency): the time-stamp counter ticks at a fixed rate that is not the core's clock.
 */
#include <immintrin.h>
#include <stdio.h>
#include <x86intrin.h>

#include "fma_clock.h"

#define N 2000000L
static float data[4096] __attribute__((aligned(64)));
static float slots[256] __attribute__((aligned(64)));

static const int IDX[16] = {0, 17, 34, 51, 68, 85, 102, 119, 136, 153, 170, 187, 204, 221, 238, 255};

/* Gathers of `lanes` elements (4, 8, 16), four independent ones an iteration; with `loads`,
 * four independent 512-bit loads beside one gather instead. `mask` switches lanes off (16 only). */
__attribute__((noinline)) static double gathers(int lanes, int loads, __mmask16 mask) {
  __m512i i16 = _mm512_loadu_si512(IDX);
  __m256i i8 = _mm256_loadu_si256((const __m256i *)IDX);
  __m128i i4 = _mm_loadu_si128((const __m128i *)IDX);
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, z = s0;
  double t = ticks();
  for (long i = 0; i < N; i++) {
    if (loads) {
      const float *p = data + 2048 + ((i * 64) & 1023);
      s0 = _mm512_add_ps(s0, _mm512_load_ps(p)); s1 = _mm512_add_ps(s1, _mm512_load_ps(p + 16));
      s2 = _mm512_add_ps(s2, _mm512_load_ps(p + 32)); s3 = _mm512_add_ps(s3, _mm512_load_ps(p + 48));
      if (lanes) z = _mm512_add_ps(z, _mm512_i32gather_ps(i16, data, 4));
    } else if (lanes == 16) {
      s0 = _mm512_add_ps(s0, _mm512_mask_i32gather_ps(z, mask, i16, data, 4));
      s1 = _mm512_add_ps(s1, _mm512_mask_i32gather_ps(z, mask, i16, data + 16, 4));
      s2 = _mm512_add_ps(s2, _mm512_mask_i32gather_ps(z, mask, i16, data + 32, 4));
      s3 = _mm512_add_ps(s3, _mm512_mask_i32gather_ps(z, mask, i16, data + 48, 4));
    } else if (lanes == 64 + 8) {  /* 8 elements with 64-bit indices: vgatherqps ymm, [.. + zmm] */
      __m512i q8 = _mm512_cvtepi32_epi64(_mm256_loadu_si256((const __m256i *)IDX));
      s0 = _mm512_add_ps(s0, _mm512_castps256_ps512(_mm512_i64gather_ps(q8, data, 4)));
      s1 = _mm512_add_ps(s1, _mm512_castps256_ps512(_mm512_i64gather_ps(q8, data + 16, 4)));
      s2 = _mm512_add_ps(s2, _mm512_castps256_ps512(_mm512_i64gather_ps(q8, data + 32, 4)));
      s3 = _mm512_add_ps(s3, _mm512_castps256_ps512(_mm512_i64gather_ps(q8, data + 48, 4)));
    } else if (lanes == 8) {
      s0 = _mm512_add_ps(s0, _mm512_castps256_ps512(_mm256_i32gather_ps(data, i8, 4)));
      s1 = _mm512_add_ps(s1, _mm512_castps256_ps512(_mm256_i32gather_ps(data + 16, i8, 4)));
      s2 = _mm512_add_ps(s2, _mm512_castps256_ps512(_mm256_i32gather_ps(data + 32, i8, 4)));
      s3 = _mm512_add_ps(s3, _mm512_castps256_ps512(_mm256_i32gather_ps(data + 48, i8, 4)));
    } else {
      s0 = _mm512_add_ps(s0, _mm512_castps128_ps512(_mm_i32gather_ps(data, i4, 4)));
      s1 = _mm512_add_ps(s1, _mm512_castps128_ps512(_mm_i32gather_ps(data + 16, i4, 4)));
      s2 = _mm512_add_ps(s2, _mm512_castps128_ps512(_mm_i32gather_ps(data + 32, i4, 4)));
      s3 = _mm512_add_ps(s3, _mm512_castps128_ps512(_mm_i32gather_ps(data + 48, i4, 4)));
    }
    __asm__ volatile("" ::: "memory");
  }
  t = ticks() - t;
  volatile float keep = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, _mm512_add_ps(s3, z))));
  (void)keep;
  return t / ((loads ? 1.0 : 4.0) * N);
}

/* A chain of gathers, each one's indices depending on the previous result (through an AND
 * with a zero the compiler cannot see and an OR: about 2 cycles, measured by `lanes` = 0). */
__attribute__((noinline)) static double gather_chain(int lanes) {
  __m512i i16 = _mm512_loadu_si512(IDX);
  __m512i v = _mm512_setzero_si512();
  double t = ticks();
  for (long i = 0; i < N; i++) {
    __m512i zero = _mm512_setzero_si512();
    __asm__("" : "+v"(zero));
    __m512i idx = _mm512_or_si512(i16, _mm512_and_si512(v, zero));
    if (lanes == 16) v = _mm512_castps_si512(_mm512_i32gather_ps(idx, data, 4));
    else if (lanes == 8) v = _mm512_castps_si512(_mm512_castps256_ps512(_mm256_i32gather_ps(data, _mm512_castsi512_si256(idx), 4)));
    else if (lanes == 4) v = _mm512_castps_si512(_mm512_castps128_ps512(_mm_i32gather_ps(data, _mm512_castsi512_si128(idx), 4)));
    else v = idx;
  }
  t = ticks() - t;
  volatile int keep = _mm512_reduce_add_epi32(v); (void)keep;
  return t / N;
}

/* Scatters of `lanes` elements, one an iteration; with `loads`, four 512-bit loads beside. */
__attribute__((noinline)) static double scatters(int lanes, int loads) {
  __m512i i16 = _mm512_loadu_si512(IDX);
  __m512 v = _mm512_set1_ps(1.0f), s0 = v, s1 = v, s2 = v, s3 = v;
  double t = ticks();
  for (long i = 0; i < N; i++) {
    if (lanes == 16) _mm512_i32scatter_ps(data, i16, v, 4);
    else if (lanes == 8) _mm256_i32scatter_ps(data, _mm512_castsi512_si256(i16), _mm512_castps512_ps256(v), 4);
    else _mm_i32scatter_ps(data, _mm512_castsi512_si128(i16), _mm512_castps512_ps128(v), 4);
    if (loads) {
      const float *p = data + 2048 + ((i * 64) & 1023);
      s0 = _mm512_add_ps(s0, _mm512_load_ps(p)); s1 = _mm512_add_ps(s1, _mm512_load_ps(p + 16));
      s2 = _mm512_add_ps(s2, _mm512_load_ps(p + 32)); s3 = _mm512_add_ps(s3, _mm512_load_ps(p + 48));
    }
    __asm__ volatile("" ::: "memory");
  }
  t = ticks() - t;
  volatile float keep = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3))); (void)keep;
  return t / N;
}

/* Two 64-byte stores, then one load of `bytes` at `offset` from the first; the loaded value
 * feeds an accumulator, not the next stores. Forwarded: a few cycles an iteration. */
__attribute__((noinline)) static double forwarding(int bytes, int offset) {
  __m512 v = _mm512_set1_ps(1.0f), w = _mm512_set1_ps(2.0f), acc = _mm512_setzero_ps();
  char *p = (char *)slots;
  double t = ticks();
  for (long i = 0; i < N; i++) {
    _mm512_storeu_ps((float *)p, v);
    _mm512_storeu_ps((float *)(p + 64), w);
    __m512 r;
    if (bytes == 64) r = _mm512_loadu_ps((float *)(p + offset));
    else if (bytes == 32) r = _mm512_castps256_ps512(_mm256_loadu_ps((float *)(p + offset)));
    else if (bytes == 16) r = _mm512_castps128_ps512(_mm_loadu_ps((float *)(p + offset)));
    else if (bytes == 8) r = _mm512_castpd_ps(_mm512_castpd128_pd512(_mm_load_sd((double *)(p + offset))));
    else r = _mm512_set1_ps(*(float *)(p + offset));
    acc = _mm512_add_ps(acc, r);
    __asm__ volatile("" ::: "memory");
  }
  t = ticks() - t;
  volatile float keep = _mm512_reduce_add_ps(acc); (void)keep;
  return t / N;
}

/* A load at the start of stores narrower than it: `kind` 0: four 4-byte stores, a 16-byte
 * load; 1: two 32-byte stores, a 64-byte load; 2: two 16-byte stores, a 32-byte load; 3: one
 * 16-byte store, a 16-byte load. */
__attribute__((noinline)) static double narrow_stores(int kind) {
  __m512 acc = _mm512_setzero_ps();
  __m256 y = _mm256_set1_ps(2.0f);
  __m128 q = _mm_set1_ps(3.0f);
  float x = 1.0f;
  char *p = (char *)slots;
  double t = ticks();
  for (long i = 0; i < N; i++) {
    __m512 r;
    if (kind == 0) {
      ((volatile float *)p)[0] = x; ((volatile float *)p)[1] = x;
      ((volatile float *)p)[2] = x; ((volatile float *)p)[3] = x;
      __asm__ volatile("" ::: "memory");
      r = _mm512_castps128_ps512(_mm_loadu_ps((float *)p));
    } else if (kind == 1) {
      _mm256_storeu_ps((float *)p, y); _mm256_storeu_ps((float *)(p + 32), y);
      __asm__ volatile("" ::: "memory");
      r = _mm512_loadu_ps((float *)p);
    } else if (kind == 2) {
      _mm_storeu_ps((float *)p, q); _mm_storeu_ps((float *)(p + 16), q);
      __asm__ volatile("" ::: "memory");
      r = _mm512_castps256_ps512(_mm256_loadu_ps((float *)p));
    } else {
      _mm_storeu_ps((float *)p, q);
      __asm__ volatile("" ::: "memory");
      r = _mm512_castps128_ps512(_mm_loadu_ps((float *)p));
    }
    acc = _mm512_add_ps(acc, r);
    __asm__ volatile("" ::: "memory");
  }
  t = ticks() - t;
  volatile float keep = _mm512_reduce_add_ps(acc); (void)keep;
  return t / N;
}

/* k loads an iteration that cannot be forwarded (each straddling two 64-byte stores). */
__attribute__((noinline)) static double failed_loads(int k, int offset) {
  __m512 v = _mm512_set1_ps(1.0f), a = _mm512_setzero_ps(), b = a;
  char *p = (char *)slots;
  double t = ticks();
  for (long i = 0; i < N; i++) {
    for (int j = 0; j <= k; j++) _mm512_storeu_ps((float *)(p + 64 * j), v);
    for (int j = 0; j < k; j++) {
      __m512 r = _mm512_loadu_ps((float *)(p + 64 * j + offset));
      if (j & 1) b = _mm512_add_ps(b, r); else a = _mm512_add_ps(a, r);
    }
    __asm__ volatile("" ::: "memory");
  }
  t = ticks() - t;
  volatile float keep = _mm512_reduce_add_ps(_mm512_add_ps(a, b)); (void)keep;
  return t / N;
}

/* Rows of accumulators updated through a moving pointer, as LLVM vectorizes a 14-wide conv2d
 * tile: each iteration loads two rows with a 16-lane load (`mask`: 14 lanes on, or all 16),
 * adds six products into each (a chain of six FMAs) and stores them back, `row` floats apart,
 * then moves on two rows. With 14-float rows, the next iteration's first row starts 8 bytes
 * before the end of the 64 bytes the previous second row's store covered. */
static float rows[4096 + 64] __attribute__((aligned(64)));

__attribute__((noinline)) static double moving_rows(int row, __mmask16 mask) {
  __m512 w0 = _mm512_set1_ps(0.5f), w1 = _mm512_set1_ps(0.25f);
  long span = 4096 / (2 * row) * (2 * row);
  float *base = rows;
  long at = 0;
  double t = ticks();
  for (long i = 0; i < N; i++) {
    float *p = base + at;
    __m512 a = _mm512_maskz_loadu_ps(mask, p), b = _mm512_maskz_loadu_ps(mask, p + row);
    a = _mm512_fmadd_ps(a, w0, w1); b = _mm512_fmadd_ps(b, w0, w1);
    a = _mm512_fmadd_ps(a, w0, w1); b = _mm512_fmadd_ps(b, w0, w1);
    a = _mm512_fmadd_ps(a, w0, w1); b = _mm512_fmadd_ps(b, w0, w1);
    a = _mm512_fmadd_ps(a, w0, w1); b = _mm512_fmadd_ps(b, w0, w1);
    a = _mm512_fmadd_ps(a, w0, w1); b = _mm512_fmadd_ps(b, w0, w1);
    a = _mm512_fmadd_ps(a, w0, w1); b = _mm512_fmadd_ps(b, w0, w1);
    _mm512_mask_storeu_ps(p, mask, a); _mm512_mask_storeu_ps(p + row, mask, b);
    at += 2 * row;
    if (at >= span) at = 0;
  }
  t = ticks() - t;
  return t / N;
}

/* Ticks of one measurement in core cycles, the clock read again right after it: the core's
 * frequency moves (boost, other load) while the time-stamp counter's does not. */
static double CYCLES(double ticks_taken) { return ticks_taken / ticks_per_cycle(N); }

int main(void) {
  for (int i = 0; i < 4096; i++) data[i] = 0.001f * i;
  double c = ticks_per_cycle(N);
  printf("time-stamp ticks per core cycle: %.3f\n", c);
  printf("gather throughput, cycles each: 4 elements %.1f, 8 %.1f (64-bit indices %.1f), 16 %.1f, 16 with 14 lanes on %.1f\n",
         CYCLES(gathers(4, 0, 0xffff)), CYCLES(gathers(8, 0, 0xffff)), CYCLES(gathers(64 + 8, 0, 0xffff)), CYCLES(gathers(16, 0, 0xffff)),
         CYCLES(gathers(16, 0, 0x3ffe)));
  double carry = CYCLES(gather_chain(0));
  printf("gather latency (chain less %.1f cycles of AND/OR): 4 elements %.1f, 8 %.1f, 16 %.1f\n", carry,
         CYCLES(gather_chain(4)) - carry, CYCLES(gather_chain(8)) - carry, CYCLES(gather_chain(16)) - carry);
  printf("4 independent 512-bit loads: alone %.1f cycles, beside a 16-element gather %.1f\n",
         CYCLES(gathers(0, 1, 0)), CYCLES(gathers(16, 1, 0)));
  printf("scatter throughput, cycles each (beside 4 loads): 4 elements %.1f (%.1f), 8 %.1f (%.1f), 16 %.1f (%.1f)\n",
         CYCLES(scatters(4, 0)), CYCLES(scatters(4, 1)), CYCLES(scatters(8, 0)), CYCLES(scatters(8, 1)), CYCLES(scatters(16, 0)), CYCLES(scatters(16, 1)));
  printf("store forwarding: cycles an iteration, load of B bytes at offset +O from two 64-byte stores\n");
  int widths[] = {64, 32, 16, 8, 4};
  for (int k = 0; k < 5; k++) {
    printf("  B=%2d:", widths[k]);
    for (int off = 0; off <= 64; off += 4) printf(" +%d:%.0f", off, CYCLES(forwarding(widths[k], off)));
    printf("\n");
  }
  printf("loads over narrower stores, cycles an iteration: 4x4-byte stores, 16-byte load %.1f; 2x32, 64 %.1f; "
         "2x16, 32 %.1f; 1x16, 16 %.1f\n", CYCLES(narrow_stores(0)), CYCLES(narrow_stores(1)), CYCLES(narrow_stores(2)),
         CYCLES(narrow_stores(3)));
  printf("k loads an iteration that cannot be forwarded (+8) against forwarded ones (+0), cycles an iteration:\n");
  for (int k = 1; k <= 4; k++) printf("  k=%d: %.1f against %.1f\n", k, CYCLES(failed_loads(k, 8)), CYCLES(failed_loads(k, 0)));
  printf("two rows of accumulators through a moving pointer (six FMAs each), cycles an iteration: 14-float rows, "
         "14 lanes %.1f; 16-float rows, 14 lanes %.1f; 16-float rows, 16 lanes %.1f\n",
         CYCLES(moving_rows(14, 0x3fff)), CYCLES(moving_rows(16, 0x3fff)), CYCLES(moving_rows(16, 0xffff)));
  return 0;
}
