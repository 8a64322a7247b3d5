/* How many vector FMAs waiting on a dependency chain an x86-64 core with AVX-512 holds, by vector
 * width, and what a dense layer's slow schedule costs beyond its FMAs, in core cycles.
 *
 * Each iteration of the chain tests loads one vector, adds K products to it in a chain of dependent
 * FMAs (latency 4) and stores it: iterations are independent, so a core that holds W waiting FMAs
 * overlaps about W / K chains and an iteration takes about max(4K * K / W, K / T) cycles, T being
 * the FMAs issued a cycle (Zen 4: one 512-bit or two 256-bit). "mem" variants take each FMA's
 * second factor from memory (an L1 hit, as LLVM's code does with a weight tile), "reg" from a
 * register. The row tests replay, step by step, one turn of LLVM's inner loop for candidate #178
 * of docs/bench/heldout-pools-25/vit-fused_matmul4_add1_add2 (a dense layer, 196 x 3072 by 3072 x
 * 768): eight chains of 16 dependent 512-bit FMAs, one for each 16-float piece of a 128-column
 * slab of the output row, each loading its accumulator and storing it back; then with the
 * accumulators in L2, with the row's 16 values of A broadcast from L3 first, with each chain's
 * weights read from an 8 KiB tile, inside the kernel's whole loop nest, and with that tile 16, 32
 * or 48 bytes past a cache line (LLVM spills the tile to a stack frame it keeps 16-byte aligned,
 * and the kernel ran at the speed of the misaligned cases). Build and run on the machine to
 * describe (record its lscpu beside the output):
 *
 *     gcc -O2 -march=x86-64-v4 scripts/microbench/fma_window.c -o /tmp/fma_window && /tmp/fma_window
 *
 * The clock (fma_clock.h) is a chain of dependent FMAs taken as 4 cycles each.
 */
#include <stdio.h>

#include "fma_clock.h"

#define N 200000L
static float acc[8192] __attribute__((aligned(64)));
static float weight[16 * 16] __attribute__((aligned(64)));

#define FZ_REG "vfmadd231ps %%zmm1, %%zmm2, %%zmm0\n\t"
#define FZ_MEM "vfmadd231ps (%1), %%zmm2, %%zmm0\n\t"
#define FY_REG "vfmadd231ps %%ymm1, %%ymm2, %%ymm0\n\t"
#define FY_MEM "vfmadd231ps (%1), %%ymm2, %%ymm0\n\t"
#define X4(s) s s s s
#define X8(s) X4(s) X4(s)
#define X16(s) X8(s) X8(s)
#define X32(s) X16(s) X16(s)

/* Ticks an iteration of: load the accumulator, `body`, store it (width: "zmm" or "ymm"). */
#define CHAIN(name, reg, body)                                                               \
  __attribute__((noinline)) static double name(void) {                                       \
    double t = ticks();                                                                      \
    for (long i = 0; i < N; i++) {                                                           \
      float *q = acc + 16 * (i & 255);                                                       \
      __asm__ volatile("vmovups (%0), %%" reg "0\n\t" body "vmovups %%" reg "0, (%0)\n\t"    \
                       :: "r"(q), "r"(weight) : "xmm0", "memory");                          \
    }                                                                                        \
    return (ticks() - t) / N;                                                                \
  }

CHAIN(z16_reg, "zmm", X16(FZ_REG))
CHAIN(z16_mem, "zmm", X16(FZ_MEM))
CHAIN(z32_reg, "zmm", X32(FZ_REG))
CHAIN(z32_mem, "zmm", X32(FZ_MEM))
CHAIN(y16_reg, "ymm", X16(FY_REG))
CHAIN(y16_mem, "ymm", X16(FY_MEM))
CHAIN(y32_reg, "ymm", X32(FY_REG))
CHAIN(y32_mem, "ymm", X32(FY_MEM))

/* One row of candidate #178's inner loop: eight accumulators of 16 floats, each loaded, given 16
 * chained FMAs whose second factor is a weight tile in memory, and stored. */
#define ROW_CHAIN(c) "vmovups " #c "(%0), %%zmm0\n\t" X16(FZ_MEM) "vmovups %%zmm0, " #c "(%0)\n\t"
__attribute__((noinline)) static double row_of_8(void) {
  double t = ticks();
  for (long i = 0; i < N; i++) {
    float *q = acc + 128 * (i & 63);
    __asm__ volatile(ROW_CHAIN(0) ROW_CHAIN(64) ROW_CHAIN(128) ROW_CHAIN(192) ROW_CHAIN(256) ROW_CHAIN(320)
                     ROW_CHAIN(384) ROW_CHAIN(448) :: "r"(q), "r"(weight) : "xmm0", "memory");
  }
  return (ticks() - t) / N;
}

/* The same row with its accumulators where #178 has them: rows of a 196 x 768 float matrix (3 KiB
 * apart), eight 64-byte pieces of each, so that one pass over the 196 rows (100 KB) misses L1
 * and hits L2; and the same work with the eight chains interleaved, one FMA of each in turn (as a
 * register-blocked schedule keeps its accumulators), which needs an eighth of the look-ahead. */
static float big[196 * 768] __attribute__((aligned(64)));
#define ROWS 196
__attribute__((noinline)) static double row_of_8_l2(void) {
  double t = ticks();
  for (long i = 0; i < N; i++) {
    float *q = big + 768 * (i % ROWS);
    __asm__ volatile(ROW_CHAIN(0) ROW_CHAIN(64) ROW_CHAIN(128) ROW_CHAIN(192) ROW_CHAIN(256) ROW_CHAIN(320)
                     ROW_CHAIN(384) ROW_CHAIN(448) :: "r"(q), "r"(weight) : "xmm0", "memory");
  }
  return (ticks() - t) / N;
}

#define LD(c, r) "vmovups " #c "(%0), %%zmm" #r "\n\t"
#define ST(c, r) "vmovups %%zmm" #r ", " #c "(%0)\n\t"
#define FM(r) "vfmadd231ps (%1), %%zmm2, %%zmm" #r "\n\t"
#define STEP FM(3) FM(4) FM(5) FM(6) FM(7) FM(8) FM(9) FM(10)
#define INTERLEAVED                                                                              \
  LD(0, 3) LD(64, 4) LD(128, 5) LD(192, 6) LD(256, 7) LD(320, 8) LD(384, 9) LD(448, 10)          \
  X16(STEP)                                                                                      \
  ST(0, 3) ST(64, 4) ST(128, 5) ST(192, 6) ST(256, 7) ST(320, 8) ST(384, 9) ST(448, 10)
#define ROW_LOOP(name, base, stride, rows, body)                                                 \
  __attribute__((noinline)) static double name(void) {                                           \
    double t = ticks();                                                                          \
    for (long i = 0; i < N; i++) {                                                               \
      float *q = base + stride * (i % rows);                                                     \
      __asm__ volatile(body :: "r"(q), "r"(weight)                                               \
                       : "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", "memory"); \
    }                                                                                            \
    return (ticks() - t) / N;                                                                    \
  }
ROW_LOOP(interleaved_l1, acc, 128, 64, INTERLEAVED)
ROW_LOOP(interleaved_l2, big, 768, ROWS, INTERLEAVED)

/* #178's row whole: before the chains, 16 broadcasts of one row's 16 floats of A, a 196 x 3072
 * matrix (rows 12 KiB apart, 2.4 MB: they come from L3), which every chain's FMAs multiply by. */
static float a_rows[196 * 3072] __attribute__((aligned(64)));
#define BC(j, r) "vbroadcastss " #j "(%2), %%zmm" #r "\n\t"
#define BROADCASTS BC(0, 11) BC(4, 12) BC(8, 13) BC(12, 14) BC(16, 15) BC(20, 16) BC(24, 17) BC(28, 18) \
  BC(32, 19) BC(36, 20) BC(40, 21) BC(44, 22) BC(48, 23) BC(52, 24) BC(56, 25) BC(60, 26)
#define FA(r) "vfmadd231ps (%1), %%zmm" #r ", %%zmm0\n\t"
#define CHAIN_A(c) "vmovups " #c "(%0), %%zmm0\n\t" FA(11) FA(12) FA(13) FA(14) FA(15) FA(16) FA(17) FA(18) \
  FA(19) FA(20) FA(21) FA(22) FA(23) FA(24) FA(25) FA(26) "vmovups %%zmm0, " #c "(%0)\n\t"
#define FI(r, b) "vfmadd231ps (%1), %%zmm" #b ", %%zmm" #r "\n\t"
#define STEP_A(b) FI(3, b) FI(4, b) FI(5, b) FI(6, b) FI(7, b) FI(8, b) FI(9, b) FI(10, b)
#define ROW_A(name, body)                                                                        \
  __attribute__((noinline)) static double name(void) {                                           \
    double t = ticks();                                                                          \
    for (long i = 0; i < N; i++) {                                                               \
      float *q = big + 768 * (i % ROWS);                                                         \
      const float *a = a_rows + 3072 * (i % ROWS) + 16 * ((i / ROWS) % 192);                     \
      __asm__ volatile(BROADCASTS body :: "r"(q), "r"(weight), "r"(a)                            \
                       : "xmm0", "xmm3", "xmm4", "xmm5", "xmm6", "xmm7", "xmm8", "xmm9", "xmm10", \
                         "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18",  \
                         "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26",  \
                         "memory");                                                              \
    }                                                                                            \
    return (ticks() - t) / N;                                                                    \
  }
ROW_A(row_of_8_a_l3, CHAIN_A(0) CHAIN_A(64) CHAIN_A(128) CHAIN_A(192) CHAIN_A(256) CHAIN_A(320) CHAIN_A(384)
      CHAIN_A(448))
ROW_A(interleaved_a_l3,
      LD(0, 3) LD(64, 4) LD(128, 5) LD(192, 6) LD(256, 7) LD(320, 8) LD(384, 9) LD(448, 10)
      STEP_A(11) STEP_A(12) STEP_A(13) STEP_A(14) STEP_A(15) STEP_A(16) STEP_A(17) STEP_A(18)
      STEP_A(19) STEP_A(20) STEP_A(21) STEP_A(22) STEP_A(23) STEP_A(24) STEP_A(25) STEP_A(26)
      ST(0, 3) ST(64, 4) ST(128, 5) ST(192, 6) ST(256, 7) ST(320, 8) ST(384, 9) ST(448, 10))

/* And with each FMA's weight where #178 has it: a 16 x 128-float tile of B (8 KiB, 128 lines, copied
 * to the stack once per 196 rows), chain c's FMAs reading lines 16c..16c+15; against the same
 * code with every chain reading the first 16 lines (1 KiB). */
static float tile_space[16 * 128 + 16] __attribute__((aligned(64)));
static float *tile = tile_space;
#define FT(r, b, j) "vfmadd231ps " #b "*1024+" #j "*64(%1), %%zmm" #r ", %%zmm0\n\t"
#define CT(c, b)                                                                                   \
  "vmovups " #c "(%0), %%zmm0\n\t" FT(11, b, 0) FT(12, b, 1) FT(13, b, 2) FT(14, b, 3) FT(15, b, 4)   \
  FT(16, b, 5) FT(17, b, 6) FT(18, b, 7) FT(19, b, 8) FT(20, b, 9) FT(21, b, 10) FT(22, b, 11)        \
  FT(23, b, 12) FT(24, b, 13) FT(25, b, 14) FT(26, b, 15) "vmovups %%zmm0, " #c "(%0)\n\t"
#define ROW_T(name, b0, b1, b2, b3, b4, b5, b6, b7)                                               \
  __attribute__((noinline)) static double name(void) {                                           \
    double t = ticks();                                                                          \
    for (long i = 0; i < N; i++) {                                                               \
      float *q = big + 768 * (i % ROWS);                                                         \
      const float *a = a_rows + 3072 * (i % ROWS) + 16 * ((i / ROWS) % 192);                     \
      __asm__ volatile(BROADCASTS CT(0, b0) CT(64, b1) CT(128, b2) CT(192, b3) CT(256, b4)       \
                       CT(320, b5) CT(384, b6) CT(448, b7) :: "r"(q), "r"(tile), "r"(a)          \
                       : "xmm0", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17",  \
                         "xmm18", "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25",  \
                         "xmm26", "memory");                                                     \
    }                                                                                            \
    return (ticks() - t) / N;                                                                    \
  }
ROW_T(row_tile_8k, 0, 1, 2, 3, 4, 5, 6, 7)
ROW_T(row_tile_1k, 0, 0, 0, 0, 0, 0, 0, 0)

/* The whole kernel's loop nest around that turn: for each of the six 128-column slabs and each of
 * the 192 steps of 16 along the 3072-long reduction, the 16 x 128 weight tile is copied from the
 * 3072 x 768 weight (9.4 MB, rows 3 KiB apart) to the tile, then the 196 turns run; cycles a turn. */
static float weights[3072 * 768] __attribute__((aligned(64)));
__attribute__((noinline)) static double kernel_178(void) {
  double t = ticks();
  long turns = 0;
  for (int slab = 0; slab < 6; slab++) {
    for (int k0 = 0; k0 < 192; k0++) {
      for (int r = 0; r < 16; r++)
        for (int c = 0; c < 128; c += 16)
          _mm512_storeu_ps(tile + 128 * r + c, _mm512_load_ps(weights + 768 * (16 * k0 + r) + 128 * slab + c));
      for (int row = 0; row < ROWS; row++, turns++) {
        float *q = big + 768 * row + 128 * slab;
        const float *a = a_rows + 3072 * row + 16 * k0;
        __asm__ volatile(BROADCASTS CT(0, 0) CT(64, 1) CT(128, 2) CT(192, 3) CT(256, 4) CT(320, 5) CT(384, 6)
                         CT(448, 7) :: "r"(q), "r"(tile), "r"(a)
                         : "xmm0", "xmm11", "xmm12", "xmm13", "xmm14", "xmm15", "xmm16", "xmm17", "xmm18",
                           "xmm19", "xmm20", "xmm21", "xmm22", "xmm23", "xmm24", "xmm25", "xmm26", "memory");
      }
    }
  }
  return (ticks() - t) / turns;
}

/* LLVM keeps #178's weight tile on the stack, which the System V ABI aligns to 16 bytes only: at
 * 16, 32 or 48 bytes past a line, every 512-bit read of it straddles two lines. */
__attribute__((noinline)) static double kernel_178_at(int offset) {
  tile = tile_space + offset / 4;
  double c = kernel_178();
  tile = tile_space;
  return c;
}

int main(void) {
  _mm_setcsr(_mm_getcsr() | 0x8040);  /* flush denormals: no slow path whatever the registers hold */
  for (int i = 0; i < 256; i++) weight[i] = 1e-3f;
  __asm__ volatile("vbroadcastss %0, %%zmm1\n\tvbroadcastss %0, %%zmm2" :: "m"(weight[0]) : "xmm1", "xmm2");
  for (int r = 0; r < 3; r++) {
    double c = ticks_per_cycle(10 * N);
    printf("chains of K dependent FMAs, one an iteration, cycles an iteration: zmm K=16 reg %.1f mem %.1f, "
           "K=32 reg %.1f mem %.1f; ymm K=16 reg %.1f mem %.1f, K=32 reg %.1f mem %.1f; "
           "#178's row (8 x 16 zmm, mem) %.1f, its accumulators in L2 %.1f; the chains interleaved %.1f, in L2 %.1f; "
           "with A's row broadcast from L3 first: the chains %.1f, interleaved %.1f; "
           "the chains with B from an 8 KiB tile %.1f, from 1 KiB %.1f; "
           "the whole loop nest, the tile copied at each step %.1f, the tile 16 / 32 / 48 bytes past a line "
           "%.1f / %.1f / %.1f\n",
           z16_reg() / c, z16_mem() / c, z32_reg() / c, z32_mem() / c, y16_reg() / c, y16_mem() / c,
           y32_reg() / c, y32_mem() / c, row_of_8() / c, row_of_8_l2() / c, interleaved_l1() / c,
           interleaved_l2() / c, row_of_8_a_l3() / c, interleaved_a_l3() / c,
           row_tile_8k() / c, row_tile_1k() / c, kernel_178() / c,
           kernel_178_at(16) / c, kernel_178_at(32) / c, kernel_178_at(48) / c);
  }
  return 0;
}
