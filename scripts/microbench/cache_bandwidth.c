/* Read bandwidth of one thread from each level of the memory hierarchy, in bytes per core cycle.
 *
 * The figures behind the `bytes_per_cycle` of a target file's caches (the rate a level is filled
 * from the level below, which the cache terms of the CPU model divide by). Build and run on the
 * machine to describe, pinned to one CPU, the machine otherwise idle (record its lscpu beside the
 * output):
 *
 *     gcc -O2 -march=x86-64-v4 (x86-64-v3 without AVX-512) scripts/microbench/cache_bandwidth.c -o /tmp/cache_bandwidth
 *     taskset -c 1 /tmp/cache_bandwidth
 *
 * Two patterns per working set: every line in order (what the prefetchers serve best), and four
 * adjacent lines out of every thirty-two (256 bytes of each 2 KiB row, the share of a tile of 32
 * floats out of rows of 256, as a conv2d's weights are read for a block of output channels).
 * Bytes count the lines read, not the lines a prefetcher brings besides.
 */
#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#include "fma_clock.h"

static double seconds(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec + 1e-9 * ts.tv_nsec;
}

/* Sum `bytes` of `buf` `reps` times, reading `take` of every `row` bytes with the widest loads (vec.h);
 * wall seconds. */
__attribute__((noinline)) static double sweep(const char *buf, size_t bytes, size_t row, size_t take, long reps) {
  vec_t s0 = vec_zero(), s1 = s0, s2 = s0, s3 = s0;
  double t = seconds();
  for (long r = 0; r < reps; r++) {
    for (size_t o = 0; o < bytes; o += row) {
      const char *p = buf + o;
      for (size_t k = 0; k < take; k += 4 * VEC_BYTES) {
        s0 = vec_add(s0, vec_load((const float *)(p + k)));
        s1 = vec_add(s1, vec_load((const float *)(p + k + VEC_BYTES)));
        s2 = vec_add(s2, vec_load((const float *)(p + k + 2 * VEC_BYTES)));
        s3 = vec_add(s3, vec_load((const float *)(p + k + 3 * VEC_BYTES)));
      }
    }
  }
  t = seconds() - t;
  volatile float keep = vec_sum(vec_add(vec_add(s0, s1), vec_add(s2, s3)));
  (void)keep;
  return t;
}

int main(void) {
  /* 256 KiB is L2 everywhere (Zen 3's is 512 KiB); 1 MiB is L2 on Zen 4 and Intel's server cores. */
  const size_t sets[] = {32 << 10, 256 << 10, 1 << 20, 16 << 20, 64 << 20, 1024L << 20};
  const char *names[] = {"32 KiB (L1)", "256 KiB (L2)", "1 MiB (L2/L3)", "16 MiB (L3)", "64 MiB (L3)", "1 GiB (DRAM)"};
  const int n_sets = sizeof sets / sizeof sets[0];
  /* The core clock: chained FMAs of 4 cycles each (fma_clock.h) on the wall clock, the fastest
   * of five runs (more iterations would not do: the chain decays into denormals). */
  double ghz = 0;
  for (int r = 0; r < 5; r++) {
    double t0 = seconds();
    ticks_per_cycle(20000000);
    double g = 16 * 20000000 / (seconds() - t0) / 1e9;
    if (g > ghz) ghz = g;
  }
  printf("core clock under %d-bit load: %.2f GHz\n", VEC_BITS, ghz);
  char *buf = aligned_alloc(4096, sets[n_sets - 1]);
  for (size_t i = 0; i < sets[n_sets - 1]; i++) buf[i] = (char)i;
  for (int s = 0; s < n_sets; s++) {
    long reps = (long)((4L << 30) / sets[s]);
    if (reps < 2) reps = 2;
    sweep(buf, sets[s], 256, 256, 1); /* warm */
    double all = (double)sets[s] * reps / sweep(buf, sets[s], 256, 256, reps) / 1e9;
    sweep(buf, sets[s], 2048, 256, 1);
    double part = (double)sets[s] / 8 * reps / sweep(buf, sets[s], 2048, 256, reps) / 1e9;
    printf("%-14s every line %6.1f GB/s %6.2f bytes/cycle; 256 of every 2048 bytes %6.1f GB/s %6.2f bytes/cycle\n",
           names[s], all, all / ghz, part, part / ghz);
  }
  return 0;
}
