/* What a second thread adds on this machine's cores: FMA throughput, an FMA latency chain,
 * and reads from L1, L2 and DRAM, each on one thread and then on two threads pinned to two
 * logical CPUs, the same work per thread. A second thread that doubles the total says the
 * two CPUs are separate cores for that kind of work; one that adds nothing says they share
 * it (SMT siblings of one core share its FMA pipes and its L1; any two cores share DRAM).
 *
 *     gcc -O2 -march=x86-64-v4 (x86-64-v3 without AVX-512) -pthread scripts/microbench/cores.c -o /tmp/cores && /tmp/cores [CPU_A CPU_B]
 *
 * Record lscpu beside the output. Times are wall clock (CLOCK_MONOTONIC), medians of five.
 */
#define _GNU_SOURCE
#include <immintrin.h>
#include <pthread.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "vec.h"

#define ITERS 40000000L

static int cpu_of[2] = {0, 1};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* Twelve independent FMA chains of the widest vector (vec.h): enough to keep two FMA pipes of latency 4 busy. */
static void fma_throughput(long n) {
  vec_t b = vec_set1(0.999999f), c = vec_set1(1e-7f);
  vec_t a0 = b, a1 = b, a2 = b, a3 = b, a4 = b, a5 = b, a6 = b, a7 = b, a8 = b, a9 = b, a10 = b, a11 = b;
  for (long i = 0; i < n / 4; i++) {
    a0 = vec_fmadd(a0, b, c); a1 = vec_fmadd(a1, b, c); a2 = vec_fmadd(a2, b, c);
    a3 = vec_fmadd(a3, b, c); a4 = vec_fmadd(a4, b, c); a5 = vec_fmadd(a5, b, c);
    a6 = vec_fmadd(a6, b, c); a7 = vec_fmadd(a7, b, c); a8 = vec_fmadd(a8, b, c);
    a9 = vec_fmadd(a9, b, c); a10 = vec_fmadd(a10, b, c); a11 = vec_fmadd(a11, b, c);
    __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));
  }
  volatile float keep = vec_sum(vec_add(
      vec_add(vec_add(a0, a1), vec_add(a2, a3)),
      vec_add(vec_add(vec_add(a4, a5), vec_add(a6, a7)),
                    vec_add(vec_add(a8, a9), vec_add(a10, a11)))));
  (void)keep;
}

/* One chain of dependent FMAs: latency-bound, leaves the pipes mostly idle. */
static void fma_latency(long n) {
  vec_t a = vec_set1(1.0f), b = vec_set1(0.999999f), c = vec_zero();
  for (long i = 0; i < n / 8; i++) {
    a = vec_fmadd(a, b, c); a = vec_fmadd(a, b, c);
  }
  volatile float keep = vec_sum(a);
  (void)keep;
}

/* Sum a buffer of `bytes` with the widest loads (vec.h), repeatedly: L1 (16 KiB), L2 (512 KiB), DRAM (256 MiB). */
static float *buffers[2];
static long buffer_bytes;

static void read_buffer(float *p, long n) {
  long floats = buffer_bytes / 4;
  vec_t s0 = vec_zero(), s1 = s0, s2 = s0, s3 = s0;
  long done = 0;
  while (done < n) {
    for (long i = 0; i < floats; i += 4 * VEC_FLOATS) {
      s0 = vec_add(s0, vec_load(p + i)); s1 = vec_add(s1, vec_load(p + i + VEC_FLOATS));
      s2 = vec_add(s2, vec_load(p + i + 2 * VEC_FLOATS)); s3 = vec_add(s3, vec_load(p + i + 3 * VEC_FLOATS));
    }
    done += floats / VEC_FLOATS;
  }
  volatile float keep = vec_sum(vec_add(vec_add(s0, s1), vec_add(s2, s3)));
  (void)keep;
}

struct job { int kind, index; long n; double seconds; };

static void *run(void *arg) {
  struct job *j = arg;
  cpu_set_t set;
  CPU_ZERO(&set);
  CPU_SET(cpu_of[j->index], &set);
  pthread_setaffinity_np(pthread_self(), sizeof set, &set);
  double t = now();
  if (j->kind == 0) fma_throughput(j->n);
  else if (j->kind == 1) fma_latency(j->n);
  else read_buffer(buffers[j->index], j->n);
  j->seconds = now() - t;
  return NULL;
}

/* Seconds for `threads` threads each doing n units (the slowest thread). */
static double timed(int kind, int threads, long n) {
  pthread_t t[2];
  struct job jobs[2];
  for (int i = 0; i < threads; i++) {
    jobs[i] = (struct job){kind, i, n, 0};
    pthread_create(&t[i], NULL, run, &jobs[i]);
  }
  double worst = 0;
  for (int i = 0; i < threads; i++) {
    pthread_join(t[i], NULL);
    if (jobs[i].seconds > worst) worst = jobs[i].seconds;
  }
  return worst;
}

static int cmp(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return (x > y) - (x < y);
}

static double median5(int kind, int threads, long n) {
  double s[5];
  for (int r = 0; r < 5; r++) s[r] = timed(kind, threads, n);
  qsort(s, 5, sizeof s[0], cmp);
  return s[2];
}

static void report(const char *name, int kind, long n) {
  double one = median5(kind, 1, n), two = median5(kind, 2, n);
  /* Speed-up of the total: two threads did twice the work in `two` seconds. */
  printf("%-34s one thread %8.4f s   two threads %8.4f s   total speed-up %.2fx\n", name, one, two, 2 * one / two);
}

int main(int argc, char **argv) {
  if (argc == 3) { cpu_of[0] = atoi(argv[1]); cpu_of[1] = atoi(argv[2]); }
  printf("logical CPUs %d and %d\n", cpu_of[0], cpu_of[1]);
  report(VEC_BITS == 512 ? "FMA throughput (12 chains, zmm)" : "FMA throughput (12 chains, ymm)", 0, ITERS * 4);
  report(VEC_BITS == 512 ? "FMA latency (1 chain, zmm)" : "FMA latency (1 chain, ymm)", 1, ITERS);
  const long sizes[3] = {16L << 10, 512L << 10, 256L << 20};
  const char *names[3] = {"reads from L1 (16 KiB a thread)", "reads from L2 (512 KiB a thread)", "reads from DRAM (256 MiB a thread)"};
  for (int k = 0; k < 3; k++) {
    buffer_bytes = sizes[k];
    for (int i = 0; i < 2; i++) {
      buffers[i] = aligned_alloc(4096, buffer_bytes);
      memset(buffers[i], 0, buffer_bytes);
    }
    report(names[k], 2, k == 2 ? (1L << 27) : ITERS * 4);
    for (int i = 0; i < 2; i++) free(buffers[i]);
  }
  return 0;
}
