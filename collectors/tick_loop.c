/* The sampler's register loop in compiled code: sleep to an absolute
 * CLOCK_MONOTONIC deadline, read every op, stamp the tick, repeat.
 *
 * An op is one pread: KIND_BINARY reads 8 little-endian bytes at offset
 * `offset` (one MSR of one CPU's /dev/cpu/N/msr), KIND_DECIMAL reads a
 * decimal number at offset 0 (a sysfs counter such as RAPL's energy_uj).
 *
 * pw_ticks() runs up to `nticks` ticks and returns how many it completed.  It
 * returns early, after the tick in which an op failed, so that the caller can
 * deal with the failure (a CPU gone offline changes the ops), or when *stop
 * becomes non-zero.  A tick whose deadline has already passed by a whole
 * period is skipped, not made up: `missed` counts those.  Deadlines are
 * start_ns + k * period_ns; *next_k carries k from one call to the next.
 * Built with the package (python -m phasewatch.cli.aot_build); loaded with
 * ctypes, which releases the GIL for the call.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

enum { KIND_BINARY = 0, KIND_DECIMAL = 1 };

static int64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (int64_t)ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

static void sleep_until(int64_t deadline_ns)
{
    struct timespec ts = { deadline_ns / 1000000000LL, deadline_ns % 1000000000LL };
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
        ;
}

static int read_op(int fd, int kind, int64_t offset, uint64_t *value)
{
    if (kind == KIND_BINARY) {
        uint64_t v;
        if (pread(fd, &v, 8, offset) != 8)
            return errno ? errno : EIO;
        *value = v;     /* x86: the device's little-endian bytes as they are */
        return 0;
    }
    char buf[32];
    ssize_t n = pread(fd, buf, sizeof buf - 1, 0);
    if (n <= 0)
        return n < 0 ? errno : EIO;
    buf[n] = 0;
    char *end;
    errno = 0;
    unsigned long long v = strtoull(buf, &end, 10);
    if (end == buf || errno)
        return EINVAL;
    *value = v;
    return 0;
}

int32_t pw_ticks(const int32_t *fds, const int32_t *kinds, const int64_t *offsets, int32_t nops,
                 int64_t start_ns, int64_t period_ns, int32_t nticks, int64_t *next_k,
                 int64_t *times, uint64_t *values, int32_t *errnos,
                 volatile const int32_t *stop, int64_t *missed, int64_t *max_late_ns)
{
    int64_t k = *next_k;
    int32_t done = 0;
    while (done < nticks && !*stop) {
        int64_t deadline = start_ns + k * period_ns;
        sleep_until(deadline);
        int64_t now = now_ns();
        int64_t late = now - deadline;
        if (late >= period_ns) {
            *missed += late / period_ns;
            k += late / period_ns;
        } else if (late > *max_late_ns) {
            *max_late_ns = late;
        }
        int failed = 0;
        uint64_t *row = values + (int64_t)done * nops;
        int32_t *err = errnos + (int64_t)done * nops;
        for (int32_t i = 0; i < nops; i++) {
            errno = 0;
            err[i] = read_op(fds[i], kinds[i], offsets[i], &row[i]);
            failed |= err[i] != 0;
        }
        times[done++] = now;
        k++;
        if (failed)
            break;
    }
    *next_k = k;
    return done;
}
