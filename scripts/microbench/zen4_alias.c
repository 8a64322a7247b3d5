/* Accumulators in memory whose addresses agree modulo 4 KiB, on an x86-64 core, in core cycles.
 *
 * The figures behind store_alias_tolerated and store_alias_penalty in
 * tuna/data/uarch/zen4.toml. Build and run on the machine to describe (record its lscpu
 * beside the output):
 *
 *     gcc -O2 -march=x86-64-v4 scripts/microbench/zen4_alias.c -o /tmp/zen4_alias && /tmp/zen4_alias
 *
 * Each step of a reduction loop updates (loads, adds to, stores) H x I floats at
 * h * SH + i * SI bytes, as a loop nest does whose accumulators are not kept in registers.
 * With SH a multiple of 4 KiB the H updates of one i agree in their low 12 address bits.
 * Every configuration runs three times in a row and the last run is
 * printed. The clock (fma_clock.h) is a chain of dependent 512-bit FMAs, taken as 4 cycles each.
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <x86intrin.h>

#include "fma_clock.h"

#define N 2000000L
#define STEPS 100000L

static float *buf;

/* Ticks a reduction step. */
__attribute__((noinline)) static double steps(int h_count, int i_count, long sh, long si) {
  float d = 0.999f;
  double t = ticks();
  for (long k = 0; k < STEPS; k++) {
    for (int h = 0; h < h_count; h++)
      for (int i = 0; i < i_count; i++) {
        float *p = (float *)((char *)buf + h * sh + i * si);
        *p = *p + d;
      }
    __asm__ volatile("" ::: "memory");  /* keep the accumulators in memory across steps */
  }
  return (ticks() - t) / STEPS;
}

static void row(double tpc, int h, int i, long sh, long si) {
  steps(h, i, sh, si);
  steps(h, i, sh, si);
  double c = steps(h, i, sh, si) / tpc;
  printf("H=%2d I=%d SH=%6ld SI=%4ld: %6.1f cycles a step, %5.1f an update\n", h, i, sh, si, c, c / (h * i));
}

int main(void) {
  buf = aligned_alloc(4096, 64L << 20);
  for (long j = 0; j < (16L << 20); j++) buf[j] = 0;
  double tpc = ticks_per_cycle(N);
  printf("time-stamp ticks per core cycle: %.3f\n", tpc);
  printf("one group: H updates 64 KiB apart, and 64 KiB + 64 bytes apart\n");
  for (int h = 4; h <= 24; h += (h < 12 ? 1 : 4)) {
    row(tpc, h, 1, 65536, 0);
    row(tpc, h, 1, 65536 + 64, 0);
  }
  printf("I groups of 12 (64 KiB apart within a group, groups 512 bytes apart)\n");
  for (int i = 1; i <= 4; i++) row(tpc, 12, i, 65536, 512);
  row(tpc, 3, 4, 65536, 512);
  return 0;
}
