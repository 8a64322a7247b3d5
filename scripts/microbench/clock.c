/* The core clock under load of the widest vectors (vec.h), from fma_clock.h, given the time-stamp counter's rate in GHz
 * (lscpu's BogoMIPS / 2 on a KVM guest, or "cpu MHz" of /proc/cpuinfo):
 *
 *     gcc -O2 -march=x86-64-v4 (x86-64-v3 without AVX-512) scripts/microbench/clock.c -o /tmp/clock && /tmp/clock 2.3
 *
 * Short runs: a chain of FMAs by 0.999999 reaches denormals after about 1e8 of them, which Intel
 * cores execute far more slowly (a reading of 0.1 GHz means that). */
#include <stdio.h>
#include <stdlib.h>

#include "fma_clock.h"

int main(int argc, char **argv) {
  double tsc_ghz = argc > 1 ? atof(argv[1]) : 1.0;
  for (int i = 0; i < 5; i++) {
    double t = ticks_per_cycle(2000000L);
    printf("%.4f ticks a cycle: core clock %.3f GHz\n", t, tsc_ghz / t);
  }
  return 0;
}
