/* How far an x86-64 core with AVX-512 looks ahead past long floating-point dependency chains,
 * in core cycles.
 *
 * The figures behind the FP scheduler entry of tuna/data/uarch/zen4.toml. Each iteration loads
 * one float, adds a register to it K times in a chain of dependent VADDSS, and stores it:
 * iterations are independent, so a core that holds W waiting micro-ops overlaps about W / K
 * chains, and an iteration takes about 3K * K / W cycles (VADDSS latency 3). One variant puts
 * four independent shuffles after every four adds (as LLVM's in-order reduction of a vector
 * does), which a core issues only once they have reached its scheduler. Build and run on the
 * machine to describe (record its lscpu beside the output):
 *
 *     gcc -O2 -march=x86-64-v4 scripts/microbench/zen4_window.c -o /tmp/zen4_window && /tmp/zen4_window
 *
 * The clock (fma_clock.h) is a chain of dependent 512-bit FMAs, taken as 4 cycles each (Zen 4's FMA
 * latency): the time-stamp counter ticks at a fixed rate that is not the core's clock.
 */
#include <immintrin.h>
#include <stdio.h>
#include <x86intrin.h>

#include "fma_clock.h"

#define N 400000L
static float in[1024] __attribute__((aligned(64)));
static float out[1024] __attribute__((aligned(64)));

#define ADD "vaddss %%xmm1, %%xmm0, %%xmm0\n\t"
#define SHUF "vmovshdup %%xmm2, %%xmm3\n\t"
#define ADD4 ADD ADD ADD ADD
#define ADD16 ADD4 ADD4 ADD4 ADD4
#define SHUF4 SHUF SHUF SHUF SHUF
#define MIXED8 ADD4 SHUF4
#define MIXED96 MIXED8 MIXED8 MIXED8 MIXED8 MIXED8 MIXED8 MIXED8 MIXED8 MIXED8 MIXED8 MIXED8 MIXED8

/* Ticks an iteration of: load, `body`, store. */
#define CHAIN(name, body)                                                                   \
  __attribute__((noinline)) static double name(void) {                                      \
    double t = (double)__rdtsc();                                                           \
    for (long i = 0; i < N; i++) {                                                          \
      const float *p = in + (i & 511);                                                      \
      float *q = out + (i & 511);                                                           \
      __asm__ volatile("vmovss (%0), %%xmm0\n\t" body "vmovss %%xmm0, (%1)\n\t"             \
                       :: "r"(p), "r"(q) : "xmm0", "xmm3", "memory");                       \
    }                                                                                       \
    return ((double)__rdtsc() - t) / N;                                                     \
  }

CHAIN(chain16, ADD16)
CHAIN(chain32, ADD16 ADD16)
CHAIN(chain48, ADD16 ADD16 ADD16)
CHAIN(chain64, ADD16 ADD16 ADD16 ADD16)
CHAIN(chain96, ADD16 ADD16 ADD16 ADD16 ADD16 ADD16)
CHAIN(chain48_shuffles, MIXED96)

int main(void) {
  __asm__ volatile("vmovss %0, %%xmm1" :: "m"(in[0]) : "xmm1");
  for (int r = 0; r < 3; r++) {
    double c = ticks_per_cycle(10 * N);
    printf("chains of K dependent VADDSS, one an iteration, cycles an iteration: K=16 %.1f, 32 %.1f, 48 %.1f, "
           "64 %.1f, 96 %.1f; K=48 with 48 independent shuffles %.1f\n",
           chain16() / c, chain32() / c, chain48() / c, chain64() / c, chain96() / c, chain48_shuffles() / c);
  }
  return 0;
}
