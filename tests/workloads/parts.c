/*
 * parts: a test program of three parts, each a fixed amount of work, so that
 * a part takes longer only when its work gets slower.
 *
 *   parts [--scale S] [--walk-kib N]
 *
 * part_hash is an integer hash loop in registers; part_walk follows a random
 * cycle of pointers through a working set of N KiB (default 64: it fits the
 * caches; a larger set misses them and the same number of steps takes
 * longer); part_float is a floating-point recurrence in registers.  --scale
 * multiplies every part's work (default 1.0, about a second each on a
 * current core).  The parts are page-aligned and kept apart by padding, so
 * their instruction pointers differ clearly.
 *
 * Prints each part's CPU time on the calling thread, "name SECONDS" a line.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define HASH_STEPS 600000000ull
#define WALK_STEPS 240000000ull
#define FLOAT_STEPS 600000000ull
#define LINE 64

static volatile uint64_t sink_u;
static volatile double sink_d;

static double thread_cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

#define PLACED(n) __attribute__((noinline, aligned(4096), section(".text.sorted." n)))

PLACED("1") void part_hash(uint64_t steps)
{
    uint64_t h = 0x9e3779b97f4a7c15ull;
    for (uint64_t i = 0; i < steps; i++) {
        h ^= h >> 33;
        h *= 0xff51afd7ed558ccdull;
        h += i;
    }
    sink_u = h;
}

PLACED("2") __attribute__((used)) void parts_padding_1(void)
{
    __asm__ volatile(".skip 65536, 0x90");
}

PLACED("3") void part_walk(uint64_t steps, void **start)
{
    void **p = start;
    for (uint64_t i = 0; i < steps; i++)
        p = (void **)*p;
    sink_u = (uintptr_t)p;
}

PLACED("4") __attribute__((used)) void parts_padding_2(void)
{
    __asm__ volatile(".skip 65536, 0x90");
}

PLACED("5") void part_float(uint64_t steps)
{
    double x = 0.5, y = 0.25;
    for (uint64_t i = 0; i < steps; i++) {
        x = x * 0.999999 + y;
        y = y * 0.5 + 0.125;
    }
    sink_d = x + y;
}

/* One random cycle through every cache line of the working set. */
static void **make_cycle(size_t bytes)
{
    size_t n = bytes / LINE;
    char *buf = aligned_alloc(LINE, n * LINE);
    size_t *order = malloc(n * sizeof *order);
    if (!buf || !order) {
        fprintf(stderr, "parts: out of memory\n");
        exit(70);
    }
    for (size_t i = 0; i < n; i++)
        order[i] = i;
    srand(1);
    for (size_t i = n - 1; i > 0; i--) {
        size_t j = (size_t)rand() % (i + 1);
        size_t t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (size_t i = 0; i < n; i++)
        *(void **)(buf + order[i] * LINE) = buf + order[(i + 1) % n] * LINE;
    void **first = (void **)(buf + order[0] * LINE);
    free(order);
    return first;
}

static void usage(void)
{
    fprintf(stderr, "usage: parts [--scale S] [--walk-kib N]\n");
    exit(2);
}

int main(int argc, char **argv)
{
    double scale = 1.0;
    size_t walk_kib = 64;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--scale") && i + 1 < argc)
            scale = atof(argv[++i]);
        else if (!strcmp(argv[i], "--walk-kib") && i + 1 < argc)
            walk_kib = (size_t)atol(argv[++i]);
        else
            usage();
    }
    if (scale <= 0 || walk_kib < 1)
        usage();
    void **cycle = make_cycle(walk_kib * 1024);
    double t0 = thread_cpu_seconds();
    part_hash((uint64_t)(HASH_STEPS * scale));
    double t1 = thread_cpu_seconds();
    part_walk((uint64_t)(WALK_STEPS * scale), cycle);
    double t2 = thread_cpu_seconds();
    part_float((uint64_t)(FLOAT_STEPS * scale));
    double t3 = thread_cpu_seconds();
    printf("part_hash %.4f\npart_walk %.4f\npart_float %.4f\n", t1 - t0, t2 - t1, t3 - t2);
    return 0;
}
