/* What a second thread adds on this machine's cores: FMA throughput, an FMA latency chain,
 * and reads from L1, L2 and DRAM, each on one thread and then on two threads pinned to two
 * logical CPUs, the same work per thread. A second thread that doubles the total says the
 * two CPUs are separate cores for that kind of work; one that adds nothing says they share
 * it (SMT siblings of one core share its FMA pipes and its L1; any two cores share DRAM).
 *
 *     gcc -O2 -march=x86-64-v4 -pthread scripts/microbench/cores.c -o /tmp/cores && /tmp/cores [CPU_A CPU_B]
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

#define ITERS 40000000L

static int cpu_of[2] = {0, 1};

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

/* Twelve independent 512-bit FMA chains: enough to keep two FMA pipes of latency 4 busy. */
static void fma_throughput(long n) {
  __m512 b = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
  __m512 a0 = b, a1 = b, a2 = b, a3 = b, a4 = b, a5 = b, a6 = b, a7 = b, a8 = b, a9 = b, a10 = b, a11 = b;
  for (long i = 0; i < n / 4; i++) {
    a0 = _mm512_fmadd_ps(a0, b, c); a1 = _mm512_fmadd_ps(a1, b, c); a2 = _mm512_fmadd_ps(a2, b, c);
    a3 = _mm512_fmadd_ps(a3, b, c); a4 = _mm512_fmadd_ps(a4, b, c); a5 = _mm512_fmadd_ps(a5, b, c);
    a6 = _mm512_fmadd_ps(a6, b, c); a7 = _mm512_fmadd_ps(a7, b, c); a8 = _mm512_fmadd_ps(a8, b, c);
    a9 = _mm512_fmadd_ps(a9, b, c); a10 = _mm512_fmadd_ps(a10, b, c); a11 = _mm512_fmadd_ps(a11, b, c);
    __asm__ volatile("" : "+v"(a0), "+v"(a1), "+v"(a2), "+v"(a3), "+v"(a4), "+v"(a5));
  }
  volatile float keep = _mm512_reduce_add_ps(_mm512_add_ps(
      _mm512_add_ps(_mm512_add_ps(a0, a1), _mm512_add_ps(a2, a3)),
      _mm512_add_ps(_mm512_add_ps(_mm512_add_ps(a4, a5), _mm512_add_ps(a6, a7)),
                    _mm512_add_ps(_mm512_add_ps(a8, a9), _mm512_add_ps(a10, a11)))));
  (void)keep;
}

/* One chain of dependent FMAs: latency-bound, leaves the pipes mostly idle. */
static void fma_latency(long n) {
  __m512 a = _mm512_set1_ps(1.0f), b = _mm512_set1_ps(0.999999f), c = _mm512_setzero_ps();
  for (long i = 0; i < n / 8; i++) {
    a = _mm512_fmadd_ps(a, b, c); a = _mm512_fmadd_ps(a, b, c);
  }
  volatile float keep = _mm512_reduce_add_ps(a);
  (void)keep;
}

/* Sum a buffer of `bytes` with 512-bit loads, repeatedly: L1 (16 KiB), L2 (512 KiB), DRAM (256 MiB). */
static float *buffers[2];
static long buffer_bytes;

static void read_buffer(float *p, long n) {
  long floats = buffer_bytes / 4;
  __m512 s0 = _mm512_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  long done = 0;
  while (done < n) {
    for (long i = 0; i < floats; i += 64) {
      s0 = _mm512_add_ps(s0, _mm512_load_ps(p + i)); s1 = _mm512_add_ps(s1, _mm512_load_ps(p + i + 16));
      s2 = _mm512_add_ps(s2, _mm512_load_ps(p + i + 32)); s3 = _mm512_add_ps(s3, _mm512_load_ps(p + i + 48));
    }
    done += floats / 16;
  }
  volatile float keep = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(s0, s1), _mm512_add_ps(s2, s3)));
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
  report("FMA throughput (12 chains, zmm)", 0, ITERS * 4);
  report("FMA latency (1 chain, zmm)", 1, ITERS);
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
