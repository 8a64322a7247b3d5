/* The widest float vector the build allows, so that the microbenchmarks here run on machines with
 * AVX-512 (built with -march=x86-64-v4: 512-bit vectors) and on those with AVX2 and FMA only (built
 * with -march=x86-64-v3: 256-bit vectors), each at its own width. */
#ifndef TUNA_VEC_H
#define TUNA_VEC_H

#include <immintrin.h>

#ifdef __AVX512F__
typedef __m512 vec_t;
#define VEC_BITS 512
#define vec_zero _mm512_setzero_ps
#define vec_set1 _mm512_set1_ps
#define vec_add _mm512_add_ps
#define vec_fmadd _mm512_fmadd_ps
#define vec_load _mm512_load_ps
#define vec_sum _mm512_reduce_add_ps
#else
typedef __m256 vec_t;
#define VEC_BITS 256
#define vec_zero _mm256_setzero_ps
#define vec_set1 _mm256_set1_ps
#define vec_add _mm256_add_ps
#define vec_fmadd _mm256_fmadd_ps
#define vec_load _mm256_load_ps
static inline float vec_sum(vec_t v) {
  float f[8];
  _mm256_storeu_ps(f, v);
  return f[0] + f[1] + f[2] + f[3] + f[4] + f[5] + f[6] + f[7];
}
#endif

#define VEC_FLOATS (VEC_BITS / 32)
#define VEC_BYTES (VEC_BITS / 8)

#endif
