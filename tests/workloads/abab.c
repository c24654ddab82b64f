/*
 * abab: a test program with two clearly different phases, run as A, B, A.
 *
 *   abab [SECONDS] [--exit CODE] [--threads N] [--print-addrs]
 *
 * region_a is an integer hash loop that lives in registers; region_b streams
 * floating-point data through an array far larger than the caches.  Each
 * region runs for SECONDS of the calling thread's CPU time (default 1.0), so
 * the split stays the same whether or not the threads share one CPU.
 * The two regions are page-aligned and kept apart by a block of padding, so
 * their instruction pointers differ clearly, also after PIE relocation.
 *
 * Prints nothing unless --print-addrs is given, which prints the run-time
 * addresses of the regions (one "name 0xADDR" per line) before starting.
 * Exits with CODE (default 0).
 */
#define _GNU_SOURCE
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define STREAM_DOUBLES (4u << 20) /* 32 MiB per array */
#define CHECK_EVERY 4096u         /* iterations between clock reads */

static double region_seconds = 1.0;
static volatile uint64_t sink_u;
static volatile double sink_d;

static double thread_cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The linker sorts .text.sorted.* sections by name, which fixes the order
 * region_a, padding, region_b whatever order the compiler emits them in. */
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

/* Keeps region_b well away from region_a in .text. */
PLACED("2") __attribute__((used)) void abab_padding(void)
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
            i = (i + 8) & (STREAM_DOUBLES - 1); /* one access per cache line */
        }
    } while (thread_cpu_seconds() < end);
    sink_d = y[STREAM_DOUBLES / 2];
}

static void *run_phases(void *unused)
{
    (void)unused;
    double *x = malloc(STREAM_DOUBLES * sizeof *x);
    double *y = malloc(STREAM_DOUBLES * sizeof *y);
    if (!x || !y) {
        fprintf(stderr, "abab: out of memory\n");
        exit(70);
    }
    for (size_t i = 0; i < STREAM_DOUBLES; i++) {
        x[i] = (double)i;
        y[i] = 1.0;
    }
    region_a(region_seconds);
    region_b(region_seconds, x, y);
    region_a(region_seconds);
    free(x);
    free(y);
    return NULL;
}

static void usage(void)
{
    fprintf(stderr, "usage: abab [SECONDS] [--exit CODE] [--threads N] [--print-addrs]\n");
    exit(64);
}

int main(int argc, char **argv)
{
    int exit_code = 0, threads = 1, print_addrs = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--exit") && i + 1 < argc)
            exit_code = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--threads") && i + 1 < argc)
            threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--print-addrs"))
            print_addrs = 1;
        else if (argv[i][0] != '-')
            region_seconds = atof(argv[i]);
        else
            usage();
    }
    if (threads < 1 || region_seconds < 0)
        usage();
    if (print_addrs) {
        printf("region_a %p\nregion_b %p\nmain %p\n",
               (void *)region_a, (void *)region_b, (void *)main);
        fflush(stdout);
    }
    if (threads == 1) {
        run_phases(NULL);
    } else {
        pthread_t tid[threads];
        for (int t = 0; t < threads; t++)
            if (pthread_create(&tid[t], NULL, run_phases, NULL) != 0) {
                fprintf(stderr, "abab: cannot create thread %d\n", t);
                return 71;
            }
        for (int t = 0; t < threads; t++)
            pthread_join(tid[t], NULL);
    }
    return exit_code;
}
