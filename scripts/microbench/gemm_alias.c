/* Two schedules of one matmul, timed with their accumulator tile at each offset from the inputs
 * modulo 4 KiB, on an x86-64 core with AVX-512, in core cycles per 512-bit FMA.
 *
 * The loop nests are BERT-base's GELU dense layer (128 x 768 by 768 x 3072) as LLVM compiled them
 * in two schedules (gemm_alias_loops.S): "wide" (MetaSchedule's pick: a 128 KiB accumulator tile,
 * weights loaded in the inner loop) and "narrow" (tuna's pick: a 16 KiB tile, activations
 * broadcast from memory in the inner loop). Both issue one 512-bit FMA for every two memory
 * operations, so they have the same port-bound time. A load whose address agrees with an older,
 * still queued store in its low 12 bits may wait for that store (4 KiB aliasing); which loads do
 * depends on where the tile lies relative to the inputs, i.e. on the allocator, not the schedule.
 * The inputs are page-aligned, the tile at page + OFFSET bytes; every offset runs three times and
 * the fastest run is printed. Build and run on the machine to describe (record its lscpu beside
 * the output):
 *
 *     gcc -O2 -march=x86-64-v4 scripts/microbench/gemm_alias.c scripts/microbench/gemm_alias_loops.S \
 *         -o /tmp/gemm_alias && /tmp/gemm_alias
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fma_clock.h"

void wide_tile(float *acc, const float *act, const float *w);
void narrow_tile(float *acc, const float *act, const float *w);

#define FMAS 18874368.0 /* 512-bit FMAs of either nest over the whole layer */

static float *act, *w;

static double wide(float *acc) {
  double t = ticks();
  for (int tile = 0; tile < 12; tile++) {
    memset(acc, 0, 128 * 256 * 4);
    wide_tile(acc, act, w + tile * 256);
  }
  return ticks() - t;
}

static double narrow(float *acc) {
  double t = ticks();
  for (int tile = 0; tile < 96; tile++) {
    memset(acc, 0, 64 * 64 * 4);
    narrow_tile(acc, act + (tile / 48) * 64 * 768, w + (tile % 48) * 64);
  }
  return ticks() - t;
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static void summary(const char *name, double *c, int n) {
  double s[64];
  memcpy(s, c, n * sizeof *c);
  qsort(s, n, sizeof *s, by_value);
  int slow = 0;
  for (int i = 0; i < n; i++) slow += c[i] > 1.15 * s[0];
  printf("%s: fastest %.3f, median %.3f, slowest %.3f cycles an FMA; %d of %d offsets over 1.15x the fastest\n",
         name, s[0], s[n / 2], s[n - 1], slow, n);
}

int main(void) {
  act = aligned_alloc(4096, 128 * 768 * 4);
  w = aligned_alloc(4096, 768 * 3072 * 4);
  char *wide_buf = aligned_alloc(4096, 128 * 256 * 4 + 4096), *narrow_buf = aligned_alloc(4096, 64 * 64 * 4 + 4096);
  for (int i = 0; i < 128 * 768; i++) act[i] = (float)(i % 7) * 0.01f;
  for (int i = 0; i < 768 * 3072; i++) w[i] = (float)(i % 5) * 0.01f;
  double tpc = ticks_per_cycle(20000000L);
  printf("time-stamp ticks per core cycle: %.3f\n", tpc);
  printf("offset: cycles an FMA, wide (MetaSchedule's pick) and narrow (tuna's pick)\n");
  double cw[64], cn[64];
  for (int k = 0; k < 64; k++) {
    float *aw = (float *)(wide_buf + 64 * k), *an = (float *)(narrow_buf + 64 * k);
    double bw = 1e30, bn = 1e30;
    for (int r = 0; r < 3; r++) {
      double x = wide(aw), y = narrow(an);
      if (x < bw) bw = x;
      if (y < bn) bn = y;
    }
    cw[k] = bw / tpc / FMAS;
    cn[k] = bn / tpc / FMAS;
    printf("%4d: %6.3f %6.3f\n", 64 * k, cw[k], cn[k]);
  }
  summary("wide", cw, 64);
  summary("narrow", cn, 64);
  return 0;
}
