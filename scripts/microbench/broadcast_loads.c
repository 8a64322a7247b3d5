/* Broadcast loads beside 512-bit FMAs, on an x86-64 core with AVX-512, in core cycles per FMA.
 *
 * Each step runs 32 independent-enough 512-bit FMAs (8 accumulator chains of 4) and K loads
 * from an L1-resident line: VBROADCASTSS zmm, m32 (what a matmul's inner loop issues when it
 * broadcasts activations from memory), VMOVUPS zmm, m512 (a full-width load), or FMAs whose
 * multiplier is an embedded broadcast {1to16} from memory (the broadcast folded into the FMA).
 * If a broadcast load needs a vector pipe that the FMAs use, each one costs an FMA slot and a
 * step takes 32 + K cycles instead of 32. Every configuration runs three times in a row and the
 * last run is printed. Build and run on the machine to describe (record its lscpu beside the
 * output):
 *
 *     gcc -O2 -march=x86-64-v4 scripts/microbench/broadcast_loads.c -o /tmp/broadcast_loads && /tmp/broadcast_loads
 */
#include <stdio.h>

#include "fma_clock.h"

#define STEPS 2000000L

static float line[64] __attribute__((aligned(64)));

#define FMA8 \
  "vfmadd231ps %%zmm30, %%zmm31, %%zmm0\n\t" "vfmadd231ps %%zmm30, %%zmm31, %%zmm1\n\t" \
  "vfmadd231ps %%zmm30, %%zmm31, %%zmm2\n\t" "vfmadd231ps %%zmm30, %%zmm31, %%zmm3\n\t" \
  "vfmadd231ps %%zmm30, %%zmm31, %%zmm4\n\t" "vfmadd231ps %%zmm30, %%zmm31, %%zmm5\n\t" \
  "vfmadd231ps %%zmm30, %%zmm31, %%zmm6\n\t" "vfmadd231ps %%zmm30, %%zmm31, %%zmm7\n\t"
#define BCAST2 "vbroadcastss (%1), %%zmm16\n\t" "vbroadcastss 4(%1), %%zmm17\n\t"
#define LOAD2 "vmovups (%1), %%zmm16\n\t" "vmovups 64(%1), %%zmm17\n\t"
#define CLOBBER "zmm0", "zmm1", "zmm2", "zmm3", "zmm4", "zmm5", "zmm6", "zmm7", "zmm16", "zmm17", "memory"

/* 32 FMAs a step and, between each group of 8, 2 x `reps` loads of one kind (0 <= reps <= 4). */
#define STEP_LOOP(NAME, LOADS)                                                       \
  __attribute__((noinline)) static double NAME(int reps) {                           \
    const float *p = line;                                                           \
    __asm__ volatile("vbroadcastss (%0), %%zmm30\n\tvbroadcastss 4(%0), %%zmm31" ::"r"(p) : "zmm30", "zmm31"); \
    double t = ticks();                                                              \
    for (long s = 0; s < STEPS; s++) {                                               \
      switch (reps) {                                                                \
        case 0: __asm__ volatile(FMA8 FMA8 FMA8 FMA8 ::"r"(s), "r"(p) : CLOBBER); break; \
        case 1: __asm__ volatile(FMA8 LOADS FMA8 FMA8 FMA8 ::"r"(s), "r"(p) : CLOBBER); break; \
        case 2: __asm__ volatile(FMA8 LOADS FMA8 LOADS FMA8 FMA8 ::"r"(s), "r"(p) : CLOBBER); break; \
        case 4: __asm__ volatile(FMA8 LOADS FMA8 LOADS FMA8 LOADS FMA8 LOADS ::"r"(s), "r"(p) : CLOBBER); break; \
        default: __asm__ volatile(FMA8 LOADS LOADS FMA8 LOADS LOADS FMA8 LOADS LOADS FMA8 LOADS LOADS ::"r"(s), "r"(p) : CLOBBER); \
      }                                                                              \
    }                                                                                \
    return (ticks() - t) / STEPS;                                                    \
  }

STEP_LOOP(with_broadcasts, BCAST2)
STEP_LOOP(with_loads, LOAD2)

/* 32 FMAs a step, `k` of them (0, 8, 16 or 32) with an embedded-broadcast memory operand. */
#define EMB8 \
  "vfmadd231ps (%1)%{1to16%}, %%zmm31, %%zmm0\n\t" "vfmadd231ps 4(%1)%{1to16%}, %%zmm31, %%zmm1\n\t" \
  "vfmadd231ps 8(%1)%{1to16%}, %%zmm31, %%zmm2\n\t" "vfmadd231ps 12(%1)%{1to16%}, %%zmm31, %%zmm3\n\t" \
  "vfmadd231ps 16(%1)%{1to16%}, %%zmm31, %%zmm4\n\t" "vfmadd231ps 20(%1)%{1to16%}, %%zmm31, %%zmm5\n\t" \
  "vfmadd231ps 24(%1)%{1to16%}, %%zmm31, %%zmm6\n\t" "vfmadd231ps 28(%1)%{1to16%}, %%zmm31, %%zmm7\n\t"
__attribute__((noinline)) static double embedded(int k) {
  const float *p = line;
  __asm__ volatile("vbroadcastss (%0), %%zmm30\n\tvbroadcastss 4(%0), %%zmm31" ::"r"(p) : "zmm30", "zmm31");
  double t = ticks();
  for (long s = 0; s < STEPS; s++) {
    switch (k) {
      case 0: __asm__ volatile(FMA8 FMA8 FMA8 FMA8 ::"r"(s), "r"(p) : CLOBBER); break;
      case 8: __asm__ volatile(EMB8 FMA8 FMA8 FMA8 ::"r"(s), "r"(p) : CLOBBER); break;
      case 16: __asm__ volatile(EMB8 FMA8 EMB8 FMA8 ::"r"(s), "r"(p) : CLOBBER); break;
      default: __asm__ volatile(EMB8 EMB8 EMB8 EMB8 ::"r"(s), "r"(p) : CLOBBER);
    }
  }
  return (ticks() - t) / STEPS;
}

int main(void) {
  for (int i = 0; i < 64; i++) line[i] = 1.0f + i * 1e-7f;
  double tpc = ticks_per_cycle(20000000L);
  printf("time-stamp ticks per core cycle: %.3f\n", tpc);
  int reps[] = {0, 1, 2, 4, 8};
  for (int i = 0; i < 5; i++) {
    int k = 2 * reps[i];
    with_broadcasts(reps[i]); with_broadcasts(reps[i]);
    double b = with_broadcasts(reps[i]) / tpc;
    with_loads(reps[i]); with_loads(reps[i]);
    double l = with_loads(reps[i]) / tpc;
    printf("32 FMAs + %2d loads a step: VBROADCASTSS zmm, m32 %5.1f cycles (%.3f an FMA); VMOVUPS zmm, m512 %5.1f (%.3f)\n",
           k, b, b / 32, l, l / 32);
  }
  int ks[] = {0, 8, 16, 32};
  for (int i = 0; i < 4; i++) {
    embedded(ks[i]); embedded(ks[i]);
    double e = embedded(ks[i]) / tpc;
    printf("32 FMAs a step, %2d of them with a {1to16} memory operand: %5.1f cycles (%.3f an FMA)\n", ks[i], e, e / 32);
  }
  return 0;
}
