/*
 * sequence: three behaviours run in the order given, to test that phases keep
 * their ids and names from run to run.
 *
 *   sequence ORDER [SECONDS]
 *
 * ORDER is a string of A, B and C, e.g. ABCAB or CABAB.  fa is an integer
 * hash loop in registers; fb follows a random cycle of pointers through a
 * 16 MiB table (its code right after fa's); fc is a floating-point
 * recurrence 64 KiB further on.  Each letter runs for SECONDS of the
 * thread's CPU time (default 0.8).
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

#define TABLE_ENTRIES (4u << 20)  /* 16 MiB of uint32_t */
#define CHECK_EVERY 4096u

static volatile uint64_t sink_u;
static volatile double sink_d;
static uint32_t *table;

static __attribute__((noinline)) double cpu_seconds(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

__attribute__((noinline)) void fa(double end)
{
    uint64_t h = 0x9E3779B97F4A7C15ull;
    for (;;) {
        for (unsigned i = 0; i < CHECK_EVERY; i++)
            h = (h ^ (h >> 31)) * 0xBF58476D1CE4E5B9ull + i;
        if (cpu_seconds() >= end)
            break;
    }
    sink_u = h;
}

__attribute__((noinline)) void fb(double end)
{
    uint32_t at = 0;
    for (;;) {
        for (unsigned i = 0; i < CHECK_EVERY; i++)
            at = table[at];
        if (cpu_seconds() >= end)
            break;
    }
    sink_u = at;
}

/* 64 KiB of code between fb and fc. */
__attribute__((used, noinline, aligned(65536))) void pad(void) { __asm__ volatile("nop"); }

__attribute__((noinline, aligned(65536))) void fc(double end)
{
    double x = 1.0;
    for (;;) {
        for (unsigned i = 0; i < CHECK_EVERY; i++)
            x = x * 0.999999 + 1e-7 / (x + 1.0);
        if (cpu_seconds() >= end)
            break;
    }
    sink_d = x;
}

static void make_cycle(void)
{
    table = malloc(sizeof *table * TABLE_ENTRIES);
    if (!table) {
        perror("malloc");
        exit(1);
    }
    for (uint32_t i = 0; i < TABLE_ENTRIES; i++)
        table[i] = i;
    uint64_t s = 88172645463325252ull;
    for (uint32_t i = TABLE_ENTRIES - 1; i > 0; i--) {  /* Sattolo: one cycle */
        s ^= s << 13, s ^= s >> 7, s ^= s << 17;
        uint32_t j = (uint32_t)(s % i), t = table[i];
        table[i] = table[j], table[j] = t;
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: sequence ORDER [SECONDS]\n");
        return 2;
    }
    double seconds = argc > 2 ? atof(argv[2]) : 0.8;
    make_cycle();
    for (const char *p = argv[1]; *p; p++) {
        double end = cpu_seconds() + seconds;
        if (*p == 'A')
            fa(end);
        else if (*p == 'B')
            fb(end);
        else if (*p == 'C')
            fc(end);
        else {
            fprintf(stderr, "sequence: %c: give A, B or C\n", *p);
            return 2;
        }
    }
    return 0;
}
