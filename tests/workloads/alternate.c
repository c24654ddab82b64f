/*
 * alternate: two clearly different phases of fixed length, alternated.
 *
 *   alternate [A_SECONDS [B_SECONDS [CYCLES]]]
 *
 * Runs region_a for A_SECONDS (default 2.0) of the thread's CPU time, then
 * region_b for B_SECONDS (default 1.0), CYCLES times (default 6): A, B, A,
 * B, ... ending with B, so 2 * CYCLES - 1 changes.  region_a is an integer
 * hash loop that lives in registers; region_b streams floating-point data
 * through an array far larger than the caches (as tests/workloads/abab.c).
 *
 * Before each region it prints "start A|B NS" on stdout, NS the
 * CLOCK_REALTIME time in nanoseconds, so that a test can tell when each
 * change happened.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define STREAM_DOUBLES (4u << 20) /* 32 MiB per array */
#define CHECK_EVERY 4096u

static volatile uint64_t sink_u;
static volatile double sink_d;

static double thread_cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void say_start(const char *name)
{
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    printf("start %s %lld\n", name, (long long)ts.tv_sec * 1000000000LL + ts.tv_nsec);
    fflush(stdout);
}

#define PLACED(n) __attribute__((noinline, aligned(4096), section(".text.sorted." n)))

PLACED("1") void region_a(double seconds)
{
    double end = thread_cpu_seconds() + seconds;
    uint64_t h = 0x9e3779b97f4a7c15ull;
    do {
        for (unsigned i = 0; i < CHECK_EVERY; i++) {
            h ^= h >> 33;
            h *= 0xff51afd7ed558ccdull;
            h ^= h >> 29;
            h += i;
        }
    } while (thread_cpu_seconds() < end);
    sink_u = h;
}

PLACED("2") __attribute__((used)) void alternate_padding(void)
{
    __asm__ volatile(".skip 65536, 0x90");
}

PLACED("3") void region_b(double seconds, double *x, double *y)
{
    double end = thread_cpu_seconds() + seconds;
    size_t i = 0;
    do {
        for (unsigned n = 0; n < CHECK_EVERY; n++) {
            y[i] = y[i] * 0.999 + x[i] * 1.001;
            i = (i + 8) & (STREAM_DOUBLES - 1);
        }
    } while (thread_cpu_seconds() < end);
    sink_d = y[STREAM_DOUBLES / 2];
}

int main(int argc, char **argv)
{
    double a = argc > 1 ? atof(argv[1]) : 2.0;
    double b = argc > 2 ? atof(argv[2]) : 1.0;
    int cycles = argc > 3 ? atoi(argv[3]) : 6;
    if (argc > 4 || a < 0 || b < 0 || cycles < 1) {
        fprintf(stderr, "usage: alternate [A_SECONDS [B_SECONDS [CYCLES]]]\n");
        return 64;
    }
    double *x = malloc(STREAM_DOUBLES * sizeof *x);
    double *y = malloc(STREAM_DOUBLES * sizeof *y);
    if (!x || !y) {
        fprintf(stderr, "alternate: out of memory\n");
        return 70;
    }
    for (size_t i = 0; i < STREAM_DOUBLES; i++) {
        x[i] = (double)i;
        y[i] = 1.0;
    }
    for (int c = 0; c < cycles; c++) {
        say_start("A");
        region_a(a);
        say_start("B");
        region_b(b, x, y);
    }
    free(x);
    free(y);
    return 0;
}
