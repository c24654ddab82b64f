/*
 * closefns: two hot functions next to each other in .text, run as A, B, A.
 *
 *   closefns [SECONDS] [--iterations N] [--print-addrs]
 *
 * alpha is an integer hash loop that lives in registers; beta walks a random
 * cycle through a 64 MiB table, one dependent load after another.  Their code
 * is adjacent (about a hundred bytes apart), so only a code signature finer
 * than a page tells them apart; their behaviour (CPI, cache misses) differs
 * completely.
 *
 * Each part runs for SECONDS of the thread's CPU time (default 1.5), or, with
 * --iterations N, for N loop iterations (the same work under any host or
 * simulator).  --print-addrs prints "name 0xADDR" for alpha, beta and the end
 * of beta before starting.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define TABLE_ENTRIES (16u << 20) /* 64 MiB of uint32_t */
#define CHECK_EVERY 4096u         /* iterations between clock reads */

static volatile uint64_t sink;

static __attribute__((noinline)) double thread_cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Stop after `iterations` (if non-zero) or once `end` CPU seconds are reached. */
static __attribute__((noinline)) int done(uint64_t n, uint64_t iterations, double end)
{
    return iterations ? n >= iterations : thread_cpu_seconds() >= end;
}

/* The linker sorts .text.sorted.* sections by name: alpha, then beta, then
 * closefns_end, with nothing between them but alignment. */
#define PLACED(n) __attribute__((noinline, section(".text.sorted.closefns" n)))

PLACED("1") uint64_t alpha(double seconds, uint64_t iterations)
{
    double end = thread_cpu_seconds() + seconds;
    uint64_t h = 0x9e3779b97f4a7c15ull, n = 0;
    do {
        for (unsigned i = 0; i < CHECK_EVERY; i++) {
            h ^= h >> 33;
            h *= 0xff51afd7ed558ccdull;
            h ^= h >> 29;
            h += i;
        }
        n += CHECK_EVERY;
    } while (!done(n, iterations, end));
    return h;
}

PLACED("2") uint64_t beta(double seconds, uint64_t iterations, const uint32_t *next)
{
    double end = thread_cpu_seconds() + seconds;
    uint64_t n = 0, sum = 0;
    uint32_t at = 0;
    do {
        for (unsigned i = 0; i < CHECK_EVERY; i++) {
            at = next[at];
            sum += at;
        }
        n += CHECK_EVERY;
    } while (!done(n, iterations, end));
    return sum;
}

PLACED("3") void closefns_end(void) {}

/* A random cycle over the table (Sattolo's shuffle), so each load misses. */
static uint32_t *random_cycle(void)
{
    uint32_t *next = malloc(TABLE_ENTRIES * sizeof *next);
    if (!next) {
        fprintf(stderr, "closefns: out of memory\n");
        exit(70);
    }
    for (uint32_t i = 0; i < TABLE_ENTRIES; i++)
        next[i] = i;
    uint64_t s = 42;
    for (uint32_t i = TABLE_ENTRIES - 1; i > 0; i--) {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        uint32_t j = (uint32_t)((s >> 33) % i);
        uint32_t t = next[i];
        next[i] = next[j];
        next[j] = t;
    }
    return next;
}

static void usage(void)
{
    fprintf(stderr, "usage: closefns [SECONDS] [--iterations N] [--print-addrs]\n");
    exit(64);
}

int main(int argc, char **argv)
{
    double seconds = 1.5;
    uint64_t iterations = 0;
    int print_addrs = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--iterations") && i + 1 < argc)
            iterations = strtoull(argv[++i], NULL, 10);
        else if (!strcmp(argv[i], "--print-addrs"))
            print_addrs = 1;
        else if (argv[i][0] != '-')
            seconds = atof(argv[i]);
        else
            usage();
    }
    if (seconds < 0)
        usage();
    if (print_addrs) {
        printf("alpha %p\nbeta %p\nclosefns_end %p\n",
               (void *)alpha, (void *)beta, (void *)closefns_end);
        fflush(stdout);
    }
    uint32_t *next = random_cycle();
    sink = alpha(seconds, iterations);
    sink += beta(seconds, iterations, next);
    sink += alpha(seconds, iterations);
    free(next);
    return 0;
}
