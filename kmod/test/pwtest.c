// SPDX-License-Identifier: GPL-2.0
/*
 * Runs inside the kmod-test VM as a static binary: loads phasewatch, drives
 * its ABI and checks the mechanics (record rate, IPs, lost records, refused
 * arguments, single opener, hotplug, unload) and the host-safety cases
 * (privilege, ioctl/mmap race, memory cap, pid namespaces, idle CPUs, exec
 * mappings, read-only descriptors).  Prints one PASS or FAIL line.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <linux/userfaultfd.h>
#include "phasewatch_uapi.h"

#define DEV "/dev/phasewatch"
#define RATE_HZ 1000.0
#define RATE_TOLERANCE 0.15
#define GROUP 1234
#define USER 1000
#define NS_GET_PARENT _IO(0xB7, 0x2)	/* nsfs: the magic this ABI used to take */

extern char __executable_start[], etext[];

struct ring {
	void *base;
	size_t bytes;
	volatile struct pw_ring_header *hdr;
	volatile struct pw_record *rec;
};

static volatile sig_atomic_t stop_loop;

static void fail(const char *fmt, ...)
{
	va_list ap;

	printf("FAIL ");
	va_start(ap, fmt);
	vprintf(fmt, ap);
	va_end(ap);
	printf("\n");
	fflush(stdout);
	exit(1);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double cpu_time_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void sleep_s(double s)
{
	struct timespec ts = { (time_t)s, (long)((s - (time_t)s) * 1e9) };

	while (nanosleep(&ts, &ts) && errno == EINTR)
		;
}

static void on_alarm(int sig)
{
	stop_loop = 1;
}

/* Spin in user mode, without calls out of this binary's .text, for @s seconds. */
static unsigned long busy_loop(double s)
{
	struct itimerval it = { .it_value = { (time_t)s, (long)((s - (time_t)s) * 1e6) } };
	unsigned long n = 0;

	stop_loop = 0;
	signal(SIGALRM, on_alarm);
	setitimer(ITIMER_REAL, &it, NULL);
	while (!stop_loop)
		n++;
	return n;
}

static int xioctl(int fd, unsigned long cmd, void *arg)
{
	return ioctl(fd, cmd, arg) ? -errno : 0;
}

static void expect_ioctl(int fd, unsigned long cmd, void *arg, int want, const char *what)
{
	int got = xioctl(fd, cmd, arg);

	if (got != want)
		fail("%s: got %s, want %s", what, strerror(-got), strerror(-want));
}

static struct pw_config config(uint64_t cpus, uint32_t tgid, uint32_t nr, uint32_t watermark)
{
	struct pw_config c = { .cpu_mask = { cpus }, .target_tgid = tgid,
			       .msr_mask = PW_MSR_ALL, .nr_records = nr,
			       .watermark = watermark };
	return c;
}

static void configure(int fd, struct pw_config *c)
{
	int err = xioctl(fd, PW_IOC_CONFIGURE, c);

	if (err)
		fail("configure: %s", strerror(-err));
}

static struct pw_stats stats(int fd)
{
	struct pw_stats s;
	int err = xioctl(fd, PW_IOC_STATS, &s);

	if (err)
		fail("stats: %s", strerror(-err));
	return s;
}

static struct ring map_ring(int fd, const struct pw_config *c, int cpu)
{
	struct ring r = { .bytes = c->ring_bytes };

	r.base = mmap(NULL, r.bytes, PROT_READ, MAP_SHARED, fd, (off_t)cpu * c->ring_bytes);
	if (r.base == MAP_FAILED)
		fail("mmap ring %d: %s", cpu, strerror(errno));
	r.hdr = r.base;
	r.rec = (void *)((char *)r.base + PW_HEADER_BYTES);
	if (r.hdr->magic != PW_RING_MAGIC || r.hdr->record_size != sizeof(struct pw_record) ||
	    r.hdr->nr_records != c->nr_records || r.hdr->cpu != (uint32_t)cpu)
		fail("ring %d header: magic %x size %u records %u cpu %u", cpu, r.hdr->magic,
		     r.hdr->record_size, r.hdr->nr_records, r.hdr->cpu);
	return r;
}

static void start(int fd)
{
	expect_ioctl(fd, PW_IOC_START, NULL, 0, "start");
}

static void stop(int fd)
{
	expect_ioctl(fd, PW_IOC_STOP, NULL, 0, "stop");
}

static void pin_to_cpu(int cpu)
{
	cpu_set_t set;

	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	if (sched_setaffinity(0, sizeof(set), &set))
		fail("sched_setaffinity: %s", strerror(errno));
}

static int module_loaded(void)
{
	char line[256];
	FILE *f = fopen("/proc/modules", "r");
	int found = 0;

	if (!f)
		fail("/proc/modules: %s", strerror(errno));
	while (fgets(line, sizeof(line), f))
		found |= !strncmp(line, "phasewatch ", 11);
	fclose(f);
	return found;
}

static void check_device(mode_t mode)
{
	struct stat st;

	if (stat(DEV, &st))
		fail(DEV ": %s", strerror(errno));
	if (!S_ISCHR(st.st_mode) || (st.st_mode & 0777) != mode || st.st_uid != 0)
		fail(DEV " mode %o uid %d, want char device %o root", st.st_mode, st.st_uid, mode);
}

/* Runs @fn in a child; fails if the child does not exit 0. */
static void in_child(void (*fn)(void), const char *what)
{
	int status;
	pid_t pid = fork();

	if (pid < 0)
		fail("fork: %s", strerror(errno));
	if (!pid) {
		fn();
		exit(0);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFEXITED(status) || WEXITSTATUS(status))
		fail("%s: child status %#x", what, status);
}

/*
 * Runs @fn in a child and fails if it has not exited 0 within @s seconds.
 * A deadlock on mmap_lock freezes every thread of the child that faults, so
 * only another process can notice it.
 */
static void in_child_within(void (*fn)(void), double s, const char *what)
{
	int status;
	double deadline = now_s() + s;
	pid_t pid = fork();

	if (pid < 0)
		fail("fork: %s", strerror(errno));
	if (!pid) {
		fn();
		exit(0);
	}
	while (waitpid(pid, &status, WNOHANG) == 0) {
		if (now_s() > deadline)
			fail("%s: hung for %.0f s", what, s);
		sleep_s(0.05);
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status))
		fail("%s: child status %#x", what, status);
}

static void become_group_member(void)
{
	gid_t g = GROUP;

	if (setgroups(1, &g) || setgid(USER) || setuid(USER))
		fail("drop to uid %d: %s", USER, strerror(errno));
}

/* A group member without capabilities: opens, but samples only its own tasks. */
static void unprivileged_member(void)
{
	struct pw_config c = config(1, 0, 16, 0);
	int fd;

	become_group_member();
	fd = open(DEV, O_RDWR);
	if (fd < 0)
		fail("group member open: %s", strerror(errno));
	expect_ioctl(fd, PW_IOC_CONFIGURE, &c, -EACCES, "unprivileged all-tasks mode");
	c = config(1, 1, 16, 0);
	expect_ioctl(fd, PW_IOC_CONFIGURE, &c, -EACCES, "unprivileged target: root's pid 1");
	c = config(1, getpid(), 16, 0);
	expect_ioctl(fd, PW_IOC_CONFIGURE, &c, 0, "unprivileged target: itself");
	close(fd);
}

/* A user outside the group does not reach open. */
static void outsider(void)
{
	if (setgid(USER + 1) || setuid(USER + 1))
		fail("drop to uid %d: %s", USER + 1, strerror(errno));
	if (open(DEV, O_RDWR) >= 0 || errno != EACCES)
		fail("open by a user outside the group: %s, want EACCES", strerror(errno));
}

/* The group parameter opens the node to a group; the group grants only open. */
static void check_group_parameter(void)
{
	if (system("insmod /phasewatch.ko group=1234"))
		fail("insmod group=1234");
	check_device(0660);
	if (chown(DEV, 0, GROUP))
		fail("chgrp " DEV ": %s", strerror(errno));
	in_child(unprivileged_member, "unprivileged group member");
	in_child(outsider, "user outside the group");
	if (system("rmmod phasewatch"))
		fail("rmmod after group=1234");
}

/* A refused reconfigure leaves the configuration it would have replaced. */
static void check_kept_config(int fd, const struct pw_config *old)
{
	struct pw_config c = config(1, 0, 0, 0);
	struct ring r;
	void *p;

	c.period_ns = 1000;
	expect_ioctl(fd, PW_IOC_CONFIGURE, &c, -EINVAL, "reconfigure with a 1 us period");
	c = config(3, 0, PW_MAX_RECORDS, 0);
	expect_ioctl(fd, PW_IOC_CONFIGURE, &c, -ENOMEM, "largest rings, above the memory cap");
	r = map_ring(fd, old, 0);
	if (mprotect(r.base, r.bytes, PROT_READ | PROT_EXEC) == 0)
		fail("mprotect made a ring executable");
	c = config(1, 0, 64, 0);
	expect_ioctl(fd, PW_IOC_CONFIGURE, &c, -EBUSY, "reconfigure while mapped");
	if (r.hdr->nr_records != old->nr_records)
		fail("refused reconfigure changed the ring");
	stats(fd);
	p = r.base;
	munmap(p, r.bytes);
}

/* The cap on ring memory: 1 % of RAM by default, and root can raise it. */
static unsigned long ring_limit_kb(void)
{
	unsigned long kb = 0;
	FILE *f = fopen("/sys/module/phasewatch/parameters/ring_limit_kb", "r");

	if (!f || fscanf(f, "%lu", &kb) != 1)
		fail("ring_limit_kb parameter unreadable");
	fclose(f);
	return kb;
}

static void check_memory_cap(int fd, char *summary, size_t len)
{
	unsigned long kb = ring_limit_kb(), ram_kb = sysconf(_SC_PHYS_PAGES) * (sysconf(_SC_PAGESIZE) / 1024);
	struct pw_config c = config(1, 0, 1u << 16, 0);	/* 8 MiB + a page */
	FILE *f;

	if (kb < ram_kb / 200 || kb > ram_kb / 50)
		fail("ring_limit_kb %lu for %lu kB of RAM, want about 1 %%", kb, ram_kb);
	expect_ioctl(fd, PW_IOC_CONFIGURE, &c, -ENOMEM, "8 MiB ring above the default cap");
	f = fopen("/sys/module/phasewatch/parameters/ring_limit_kb", "w");
	if (!f || fprintf(f, "%lu\n", 16384ul) < 0 || fclose(f))
		fail("raising ring_limit_kb: %s", strerror(errno));
	configure(fd, &c);
	c = config(3, 0, 1u << 16, 0);
	expect_ioctl(fd, PW_IOC_CONFIGURE, &c, -ENOMEM, "two 8 MiB rings above a 16 MiB cap");
	f = fopen("/sys/module/phasewatch/parameters/ring_limit_kb", "w");
	if (!f || fprintf(f, "%lu\n", kb) < 0 || fclose(f))
		fail("restoring ring_limit_kb: %s", strerror(errno));
	snprintf(summary, len, "cap=%lukB", kb);
}

static void check_refusals(int fd)
{
	struct pw_config c;
	struct pw_consume consume = { .cpu = 0, .tail = 1 };

	expect_ioctl(fd, PW_IOC_START, NULL, -EINVAL, "start before configure");
	expect_ioctl(fd, PW_IOC_STATS, &c, -EINVAL, "stats before configure");
	expect_ioctl(fd, _IO(PW_IOC_MAGIC, 99), NULL, -ENOTTY, "unknown ioctl");
	expect_ioctl(fd, NS_GET_PARENT, NULL, -ENOTTY, "nsfs NS_GET_PARENT");
	expect_ioctl(fd, _IO(0xB7, 2), NULL, -ENOTTY, "the old magic's START");
	c = config(0, 0, 0, 0);
	expect_ioctl(fd, PW_IOC_CONFIGURE, &c, -EINVAL, "empty cpu mask");
	c = config(1, 0, 0, 0);
	c.cpu_mask[PW_CPU_WORDS - 1] = 1ull << 63;
	expect_ioctl(fd, PW_IOC_CONFIGURE, &c, -EINVAL, "cpu 1023");
	c = config(1, 0, 0, 0);
	c.msr_mask = 1u << PW_NR_MSRS;
	expect_ioctl(fd, PW_IOC_CONFIGURE, &c, -EINVAL, "MSR outside the allowlist");
	c = config(1, 0, 0, 0);
	c.period_ns = 1000;
	expect_ioctl(fd, PW_IOC_CONFIGURE, &c, -EINVAL, "1 us period");
	c = config(1, 0, 1000, 0);
	expect_ioctl(fd, PW_IOC_CONFIGURE, &c, -EINVAL, "ring of 1000 records");
	c = config(1, 0, 256, 512);
	expect_ioctl(fd, PW_IOC_CONFIGURE, &c, -EINVAL, "watermark above ring size");
	c = config(1, 0x7ffffff0, 0, 0);
	expect_ioctl(fd, PW_IOC_CONFIGURE, &c, -EINVAL, "no such target");
	c = config(1, 0, 0, 0);
	c.reserved[1] = 1;
	expect_ioctl(fd, PW_IOC_CONFIGURE, &c, -EINVAL, "reserved field set");
	expect_ioctl(fd, (unsigned long)PW_IOC_CONFIGURE, (void *)16, -EFAULT, "bad pointer");

	c = config(1, 0, 256, 0);
	configure(fd, &c);
	expect_ioctl(fd, PW_IOC_CONSUME, &consume, -EINVAL, "consume past head");
	consume.cpu = 5;
	consume.tail = 0;
	expect_ioctl(fd, PW_IOC_CONSUME, &consume, -EINVAL, "consume unwatched cpu");
	if (mmap(NULL, c.ring_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0) != MAP_FAILED)
		fail("writable mapping allowed");
	if (mmap(NULL, c.ring_bytes, PROT_READ, MAP_SHARED, fd, c.ring_bytes) != MAP_FAILED)
		fail("mapping of an unwatched cpu allowed");
	if (mmap(NULL, c.ring_bytes, PROT_READ | PROT_EXEC, MAP_SHARED, fd, 0) != MAP_FAILED ||
	    errno != EPERM)
		fail("executable mapping: %s, want EPERM", strerror(errno));
	check_kept_config(fd, &c);
}

static int in_text(uint64_t ip)
{
	return ip >= (uintptr_t)__executable_start && ip < (uintptr_t)etext;
}

/* Target mode on CPU 0: rate, IPs, tids, intervals. */
static void check_sampling(int fd, char *summary, size_t len)
{
	struct pw_config c = config(1, getpid(), 4096, 0);
	struct ring r;
	struct pw_stats s;
	uint64_t n, i, user = 0, outside = 0, bad_ip = 0;
	double t0, t1, rate, span, cpu0, ran;

	pin_to_cpu(0);
	configure(fd, &c);
	r = map_ring(fd, &c, 0);
	t0 = now_s();
	cpu0 = cpu_time_s();
	start(fd);
	busy_loop(2.0);
	stop(fd);
	ran = cpu_time_s() - cpu0;
	t1 = now_s();
	s = stats(fd);
	n = r.hdr->head;
	if (n < 100 || n >= c.nr_records)
		fail("%llu records in %.2f s", (unsigned long long)n, t1 - t0);
	for (i = 0; i < n; i++) {
		volatile struct pw_record *rec = &r.rec[i];

		if (rec->cpu != 0 || rec->tid != (uint32_t)getpid() || !(rec->flags & PW_REC_TARGET))
			fail("record %llu: cpu %u tid %u flags %x", (unsigned long long)i,
			     rec->cpu, rec->tid, rec->flags);
		if (i && (rec->t_ns <= r.rec[i - 1].t_ns || rec->interval < r.rec[i - 1].interval))
			fail("record %llu: time or interval went backwards", (unsigned long long)i);
		if (s.clock == PW_CLOCK_SOFTWARE && rec->instructions != PW_MISSING)
			fail("software clock but instructions read");
		if (!(rec->flags & PW_REC_USER))
			continue;
		user++;
		if (!in_text(rec->ip)) {
			outside++;
			bad_ip = rec->ip;
		}
	}
	span = (r.rec[n - 1].t_ns - r.rec[0].t_ns) * 1e-9;
	rate = (n - 1) / span;
	/*
	 * A loaded host makes the emulated timer late: those periods count as
	 * missed, so the rate falls short only by what missed accounts for.
	 */
	if (rate > RATE_HZ * (1 + RATE_TOLERANCE) ||
	    (rate < RATE_HZ * (1 - RATE_TOLERANCE) && s.missed < span * RATE_HZ * RATE_TOLERANCE))
		fail("record rate %.0f Hz (%llu records over %.3f s, %llu periods missed by a late timer)",
		     rate, (unsigned long long)n, span, (unsigned long long)s.missed);
	if (user < n * 9 / 10)
		fail("only %llu of %llu records in user mode", (unsigned long long)user,
		     (unsigned long long)n);
	if (outside)
		fail("%llu user IPs outside .text [%p, %p), e.g. %#llx", (unsigned long long)outside,
		     __executable_start, etext, (unsigned long long)bad_ip);
	/* MSRs were probed at configure: only those found are read, so none faults. */
	if (s.msr_faults || (c.msr_mask & ~PW_MSR_ALL))
		fail("%llu MSR faults on each-tick reads, probed mask %#x",
		     (unsigned long long)s.msr_faults, c.msr_mask);
	if (!(c.msr_mask & (1u << PW_MSR_PPERF)) && r.rec[0].pperf != PW_MISSING)
		fail("PPERF not found at configure but read");
	if (s.records != n || s.lost || s.ticks != s.records + s.skipped + s.lost)
		fail("stats: ticks %llu records %llu lost %llu skipped %llu",
		     (unsigned long long)s.ticks, (unsigned long long)s.records,
		     (unsigned long long)s.lost, (unsigned long long)s.skipped);
	/*
	 * The timer runs only while the target does: every period of its CPU
	 * time is a tick or a missed period, and none beyond the wall time.
	 */
	if (s.ticks + s.missed < ran * RATE_HZ * 0.95 - 5 ||
	    s.ticks + s.missed > (t1 - t0) * RATE_HZ * 1.01 + 2)
		fail("%llu ticks + %llu missed periods over %.3f s run of %.3f s",
		     (unsigned long long)s.ticks, (unsigned long long)s.missed, ran, t1 - t0);
	if (!s.intervals || s.intervals != r.hdr->intervals || s.clock == PW_CLOCK_NONE)
		fail("intervals %llu (ring %llu), clock %u", (unsigned long long)s.intervals,
		     (unsigned long long)r.hdr->intervals, s.clock);
	if (r.rec[n - 1].interval == r.rec[0].interval)
		fail("records never crossed an interval end");
	snprintf(summary, len, "msrs=%#x rate=%.1fHz records=%llu span=%.3fs missed=%llu user=%llu intervals=%llu clock=%s",
		 c.msr_mask, rate, (unsigned long long)n, span, (unsigned long long)s.missed, (unsigned long long)user,
		 (unsigned long long)s.intervals,
		 s.clock == PW_CLOCK_SOFTWARE ? "software" : "instructions");
	munmap(r.base, r.bytes);
}

/* All tasks, small ring, reader stops reading: new samples are lost, old ones kept. */
static void check_lost(int fd, char *summary, size_t len)
{
	struct pw_config c = config(1, 0, 256, 128);
	struct pollfd pfd = { .fd = fd, .events = POLLIN };
	struct pw_consume consume = { .cpu = 0 };
	struct ring r;
	struct pw_stats s;
	uint64_t first_t, head, lost_before, lost_after;
	double t0;

	c.interval_insns = 10000000000ull;	/* no interval end may wake poll here */
	configure(fd, &c);
	r = map_ring(fd, &c, 0);
	start(fd);
	t0 = now_s();
	if (poll(&pfd, 1, 5000) != 1 || !(pfd.revents & POLLIN))
		fail("poll did not report the watermark");
	if (r.hdr->head - r.hdr->tail < c.watermark)
		fail("poll woke at fill %llu below watermark %u",
		     (unsigned long long)(r.hdr->head - r.hdr->tail), c.watermark);
	t0 = now_s() - t0;
	first_t = r.rec[0].t_ns;
	sleep_s(0.6);
	/* Sampling goes on: the stats must fall between two reads of the header. */
	lost_before = r.hdr->lost;
	s = stats(fd);
	lost_after = r.hdr->lost;
	if (r.hdr->head - r.hdr->tail != c.nr_records)
		fail("full ring holds %llu records, want %u",
		     (unsigned long long)(r.hdr->head - r.hdr->tail), c.nr_records);
	if (r.rec[0].t_ns != first_t)
		fail("unread record overwritten");
	if (s.lost < 20 || s.lost < lost_before || s.lost > lost_after)	/* 600 at 1 kHz */
		fail("lost %llu (ring %llu..%llu) after 0.6 s over a full ring",
		     (unsigned long long)s.lost, (unsigned long long)lost_before,
		     (unsigned long long)lost_after);
	if (system("rmmod phasewatch 2>/dev/null") == 0 || !module_loaded())
		fail("module unloaded while its rings were mapped");
	consume.tail = r.hdr->head;
	expect_ioctl(fd, PW_IOC_CONSUME, &consume, 0, "consume");
	head = r.hdr->head;
	sleep_s(0.1);
	if (r.hdr->head <= head || r.hdr->tail != consume.tail)
		fail("no records after the reader caught up");
	stop(fd);
	snprintf(summary, len, "lost=%llu watermark_wake=%.3fs", (unsigned long long)s.lost, t0);
	munmap(r.base, r.bytes);
}

static int set_online(int cpu, int on)
{
	char path[64];
	int fd, ok;

	snprintf(path, sizeof(path), "/sys/devices/system/cpu/cpu%d/online", cpu);
	fd = open(path, O_WRONLY);
	if (fd < 0)
		return -errno;
	ok = write(fd, on ? "1" : "0", 1) == 1;
	close(fd);
	return ok ? 0 : -errno;
}

/* Both CPUs watched; CPU 1 goes offline and comes back while sampling. */
static void check_hotplug(int fd, char *summary, size_t len)
{
	struct pw_config c = config(3, 0, 4096, 0);
	struct ring r;
	uint64_t head;

	if (sysconf(_SC_NPROCESSORS_ONLN) < 2) {
		snprintf(summary, len, "hotplug=skipped(1 cpu)");
		return;
	}
	configure(fd, &c);
	r = map_ring(fd, &c, 1);
	start(fd);
	sleep_s(0.1);
	if (!r.hdr->online || !r.hdr->head)
		fail("cpu 1 not sampled");
	if (set_online(1, 0))
		fail("cpu 1 offline: %s", strerror(errno));
	head = r.hdr->head;
	sleep_s(0.1);
	if (r.hdr->online || r.hdr->head != head)
		fail("cpu 1 sampled while offline");
	if (stats(fd).nr_cpus != 1)
		fail("stats count %u cpus with cpu 1 offline", stats(fd).nr_cpus);
	if (set_online(1, 1))
		fail("cpu 1 online: %s", strerror(errno));
	sleep_s(0.1);
	if (!r.hdr->online || r.hdr->head <= head)
		fail("cpu 1 not sampled after coming back");
	stop(fd);
	snprintf(summary, len, "hotplug=ok");
	munmap(r.base, r.bytes);
}

/* An O_RDONLY descriptor may read stats but not configure, start or stop. */
static void check_read_only(void)
{
	struct pw_config c = config(1, 0, 16, 0);
	int fd = open(DEV, O_RDONLY);

	if (fd < 0)
		fail("open O_RDONLY: %s", strerror(errno));
	expect_ioctl(fd, PW_IOC_CONFIGURE, &c, -EBADF, "configure on O_RDONLY");
	expect_ioctl(fd, PW_IOC_START, NULL, -EBADF, "start on O_RDONLY");
	expect_ioctl(fd, PW_IOC_STOP, NULL, -EBADF, "stop on O_RDONLY");
	close(fd);
}

/* A ring mapping is not inherited: the child of fork faults on it. */
static void check_dontcopy(int fd, const struct pw_config *c)
{
	struct ring r = map_ring(fd, c, 0);
	int status;
	pid_t pid = fork();

	if (!pid) {
		signal(SIGSEGV, SIG_DFL);
		exit(r.hdr->magic == PW_RING_MAGIC ? 0 : 3);
	}
	if (waitpid(pid, &status, 0) != pid || !WIFSIGNALED(status) || WTERMSIG(status) != SIGSEGV)
		fail("fork child read the ring (status %#x): VM_DONTCOPY not set", status);
	munmap(r.base, r.bytes);
}

/* ioctl copying to a buffer that faults (mmap_lock) against mmap (pw_lock). */
struct race {
	int fd;
	const struct pw_config *c;
	volatile int done;
	unsigned long n;
};

static void *race_ioctl(void *arg)
{
	struct race *rc = arg;
	double end = now_s() + 1.5;
	char *page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);

	if (page == MAP_FAILED)
		fail("mmap anonymous: %s", strerror(errno));
	while (now_s() < end) {
		madvise(page, 4096, MADV_DONTNEED);	/* the copy out faults again */
		if (xioctl(rc->fd, PW_IOC_STATS, page))
			fail("stats in the race: %s", strerror(errno));
		rc->n++;
	}
	rc->done = 1;
	return NULL;
}

static void *race_mmap(void *arg)
{
	struct race *rc = arg;
	double end = now_s() + 1.5;

	while (now_s() < end) {
		void *p = mmap(NULL, rc->c->ring_bytes, PROT_READ, MAP_SHARED, rc->fd, 0);

		if (p == MAP_FAILED)
			fail("mmap in the race: %s", strerror(errno));
		munmap(p, rc->c->ring_bytes);
		rc->n++;
	}
	rc->done = 1;
	return NULL;
}

static void check_race(int fd, char *summary, size_t len)
{
	struct pw_config c = config(1, 0, 64, 0);
	struct race a = { .fd = fd, .c = &c }, b = { .fd = fd, .c = &c };
	pthread_t ta, tb;
	double deadline;

	configure(fd, &c);
	if (pthread_create(&ta, NULL, race_ioctl, &a) || pthread_create(&tb, NULL, race_mmap, &b))
		fail("pthread_create");
	deadline = now_s() + 20;
	while (!(a.done && b.done) && now_s() < deadline)
		sleep_s(0.05);
	if (!(a.done && b.done))
		fail("ioctl/mmap race hung (%lu ioctls, %lu mmaps)", a.n, b.n);
	pthread_join(ta, NULL);
	pthread_join(tb, NULL);
	snprintf(summary, len, "race=%lu/%lu", a.n, b.n);
}

/*
 * The same race made certain with userfaultfd: the ioctl's copy out faults
 * on a page that a handler thread fills only after the mmap is under way.
 * Holding the module's lock across that copy deadlocks: the ioctl waits for
 * the handler, the handler's UFFDIO_COPY for mmap_lock, and mmap, holding
 * mmap_lock, for the module's lock.
 */
struct uffd_race {
	int fd, uffd;
	const struct pw_config *c;
	char *page;
	volatile int faulted, ioctl_done, mmap_done, copied;
};

static void *uffd_ioctl(void *arg)
{
	struct uffd_race *u = arg;

	if (xioctl(u->fd, PW_IOC_STATS, u->page))
		fail("stats into a userfaultfd page: %s", strerror(errno));
	u->ioctl_done = 1;
	return NULL;
}

static void *uffd_mmap(void *arg)
{
	struct uffd_race *u = arg;
	void *p = mmap(NULL, u->c->ring_bytes, PROT_READ, MAP_SHARED, u->fd, 0);

	if (p == MAP_FAILED)
		fail("mmap during the fault: %s", strerror(errno));
	munmap(p, u->c->ring_bytes);
	u->mmap_done = 1;
	return NULL;
}

static void *uffd_handler(void *arg)
{
	static char src[4096] __attribute__((aligned(4096)));
	struct uffd_race *u = arg;
	struct uffd_msg msg;
	struct pollfd pfd = { .fd = u->uffd, .events = POLLIN };
	struct uffdio_copy copy = { .src = (uintptr_t)src, .len = 4096 };

	if (poll(&pfd, 1, 10000) != 1 || read(u->uffd, &msg, sizeof(msg)) != sizeof(msg) ||
	    msg.event != UFFD_EVENT_PAGEFAULT)
		fail("no userfaultfd fault from the ioctl's copy out");
	u->faulted = 1;
	sleep_s(0.3);	/* the mmap starts meanwhile */
	copy.dst = msg.arg.pagefault.address & ~4095ull;
	if (ioctl(u->uffd, UFFDIO_COPY, &copy))
		fail("UFFDIO_COPY: %s", strerror(errno));
	u->copied = 1;
	return NULL;
}

static void check_uffd_race(int fd)
{
	struct pw_config c = config(1, 0, 64, 0);
	struct uffd_race u = { .fd = fd, .c = &c };
	struct uffdio_api api = { .api = UFFD_API };
	struct uffdio_register reg = { .mode = UFFDIO_REGISTER_MODE_MISSING };
	pthread_t th, ti, tm;
	double deadline;

	configure(fd, &c);
	u.uffd = syscall(SYS_userfaultfd, O_CLOEXEC);
	if (u.uffd < 0 || ioctl(u.uffd, UFFDIO_API, &api))
		fail("userfaultfd: %s", strerror(errno));
	u.page = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	reg.range.start = (uintptr_t)u.page;
	reg.range.len = 4096;
	if (u.page == MAP_FAILED || ioctl(u.uffd, UFFDIO_REGISTER, &reg))
		fail("UFFDIO_REGISTER: %s", strerror(errno));
	if (pthread_create(&th, NULL, uffd_handler, &u) || pthread_create(&ti, NULL, uffd_ioctl, &u))
		fail("pthread_create");
	deadline = now_s() + 10;
	while (!u.faulted && now_s() < deadline)
		sleep_s(0.01);
	if (pthread_create(&tm, NULL, uffd_mmap, &u))
		fail("pthread_create");
	deadline = now_s() + 10;
	while (!(u.ioctl_done && u.mmap_done && u.copied) && now_s() < deadline)
		sleep_s(0.05);
	if (!(u.ioctl_done && u.mmap_done && u.copied))
		fail("ioctl faulting on a userfaultfd page vs mmap hung (ioctl %d mmap %d copy %d)",
		     u.ioctl_done, u.mmap_done, u.copied);
	pthread_join(th, NULL);
	pthread_join(ti, NULL);
	pthread_join(tm, NULL);
	munmap(u.page, 4096);
	close(u.uffd);
}

static int race_fd;

static void races(void)
{
	char summary[64];

	check_race(race_fd, summary, sizeof(summary));
	printf("pwtest: %s\n", summary);
	check_uffd_race(race_fd);
}

/* Pid 1 of a new pid namespace samples itself and sees its own ids. */
static void pidns_reader(void)
{
	struct pw_config c = config(1, getpid(), 4096, 0);
	struct ring r;
	uint64_t i, n;
	int fd = open(DEV, O_RDWR);

	if (getpid() != 1)
		fail("not pid 1 in the new namespace: %d", getpid());
	if (fd < 0)
		fail("open in the pid namespace: %s", strerror(errno));
	configure(fd, &c);
	r = map_ring(fd, &c, 0);
	start(fd);
	busy_loop(0.3);
	stop(fd);
	n = r.hdr->head;
	if (n < 50)
		fail("%llu records in the pid namespace", (unsigned long long)n);
	for (i = 0; i < n; i++)
		if (r.rec[i].pid != 1 || r.rec[i].tid != 1)
			fail("record %llu in the pid namespace: pid %u tid %u, want 1 1",
			     (unsigned long long)i, r.rec[i].pid, r.rec[i].tid);
	munmap(r.base, r.bytes);
	close(fd);
}

static void new_pid_namespace(void)
{
	if (unshare(CLONE_NEWPID))
		fail("unshare(CLONE_NEWPID): %s", strerror(errno));
	in_child(pidns_reader, "reader in a new pid namespace");
}

/* Local timer interrupts of @cpu so far (/proc/interrupts LOC). */
static unsigned long long local_timer_irqs(int cpu)
{
	char line[512];
	FILE *f = fopen("/proc/interrupts", "r");
	unsigned long long v[2] = { 0, 0 };

	if (!f)
		fail("/proc/interrupts: %s", strerror(errno));
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, " LOC: %llu %llu", &v[0], &v[1]) >= 1)
			break;
	fclose(f);
	return v[cpu];
}

static double timer_irq_rate(int cpu, double s)
{
	unsigned long long before = local_timer_irqs(cpu);

	sleep_s(s);
	return (local_timer_irqs(cpu) - before) / s;
}

/*
 * Target mode over both CPUs while the target sleeps on CPU 0: CPU 1, idle,
 * must take no more timer interrupts than without the module; then the
 * target runs and is sampled.
 */
static void check_idle(int fd, char *summary, size_t len)
{
	int go[2];
	char byte = 0;
	pid_t pid;
	struct pw_config c;
	struct pw_stats s;
	double before, during;

	if (pipe(go))
		fail("pipe: %s", strerror(errno));
	pin_to_cpu(0);
	pid = fork();
	if (!pid) {
		if (read(go[0], &byte, 1) != 1)
			exit(3);
		busy_loop(0.3);
		exit(0);
	}
	c = config(3, pid, 4096, 0);
	configure(fd, &c);
	before = timer_irq_rate(1, 1.0);
	start(fd);
	sleep_s(0.3);	/* let the start's own work on CPU 1 settle */
	during = timer_irq_rate(1, 1.0);
	if (write(go[1], &byte, 1) != 1)
		fail("pipe write");
	waitpid(pid, NULL, 0);
	stop(fd);
	s = stats(fd);
	if (during > before + 50)
		fail("idle cpu 1 took %.0f timer interrupts/s while the target slept, %.0f/s before",
		     during, before);
	if (s.records < 10)	/* 300 at 1 kHz; a loaded host's emulated timer runs late */
		fail("target sampled %llu times in 0.3 s of running", (unsigned long long)s.records);
	snprintf(summary, len, "idle_cpu1_loc=%.0f/s(before %.0f/s) target_records=%llu",
		 during, before, (unsigned long long)s.records);
	close(go[0]);
	close(go[1]);
}

/* --- cost: how long a tick takes on the CPU it samples ------------------ */

#define COST_CPUS_MAX	64
#define TRACING		"/sys/kernel/tracing"

/* Spin on every CPU at once for @s seconds, in children pinned one a CPU. */
static void spin_everywhere(int ncpus, double s)
{
	pid_t pids[COST_CPUS_MAX];

	for (int cpu = 0; cpu < ncpus; cpu++) {
		pids[cpu] = fork();
		if (pids[cpu] < 0)
			fail("fork: %s", strerror(errno));
		if (pids[cpu] == 0) {
			pin_to_cpu(cpu);
			busy_loop(s);
			_exit(0);
		}
	}
	for (int cpu = 0; cpu < ncpus; cpu++)
		waitpid(pids[cpu], NULL, 0);
}

static void shell(const char *command)
{
	if (system(command))
		fail("%s: failed", command);
}

/*
 * Sample all tasks on every CPU at 1 kHz while every CPU spins, with the
 * function_graph tracer timing each pw_tick (entry to return, on its CPU),
 * and print how many ticks were timed and their mean and percentiles in µs.
 * "spin" is one CPU's busy-loop rate, alone, to set against the host's
 * (pwtest spin on the host): under TCG the guest's time is the emulator's.
 */
static int cost(double s)
{
	int ncpus = (int)sysconf(_SC_NPROCESSORS_ONLN);
	unsigned long spins;
	struct pw_config c;
	struct pw_stats st;
	int fd;

	if (ncpus > COST_CPUS_MAX)
		ncpus = COST_CPUS_MAX;
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("\n");
	pin_to_cpu(0);
	spins = busy_loop(1.0);
	if (system("insmod /phasewatch.ko"))
		fail("insmod");
	fd = open(DEV, O_RDWR);
	if (fd < 0)
		fail("open: %s", strerror(errno));
	c = config(ncpus >= 64 ? ~0ULL : (1ULL << ncpus) - 1, 0, 4096, 0);
	configure(fd, &c);
	shell("mount -t tracefs tracefs " TRACING);
	shell("echo pw_tick > " TRACING "/set_ftrace_filter");
	shell("echo function_graph > " TRACING "/current_tracer");
	shell("echo 1 > " TRACING "/tracing_on");
	start(fd);
	spin_everywhere(ncpus, s);
	stop(fd);
	shell("echo 0 > " TRACING "/tracing_on");
	st = stats(fd);
	printf("COST cpus=%d seconds=%.1f ticks=%llu missed=%llu spin=%lu/s\n", ncpus, s,
	       (unsigned long long)st.ticks, (unsigned long long)st.missed, spins);
	/* "  3.456 us    |  pw_tick [phasewatch]();": the number before "us" */
	shell("awk '/pw_tick/ { for (i = 1; i < NF; i++) if ($(i + 1) == \"us\") print $i }' "
	      TRACING "/trace | sort -n > /tick_us");
	shell("awk '{ v[NR] = $1; sum += $1 } END { if (NR == 0) { print \"COST timed=0\"; exit } "
	      "printf \"COST timed=%d mean_us=%.2f p50_us=%.2f p90_us=%.2f p99_us=%.2f\\n\", NR, "
	      "sum / NR, v[int(NR * 0.5) + 1], v[int(NR * 0.9) + 1], v[int(NR * 0.99) + 1] }' /tick_us");
	close(fd);
	return 0;
}

int main(int argc, char **argv)
{
	char sampling[256], lost[128], hotplug[64], cap[64], idle[128];
	struct pw_config c;
	int fd, fd2;

	if (argc == 3 && !strcmp(argv[1], "spin")) {
		double secs = atof(argv[2]);

		if (secs <= 0)
			fail("spin: give the seconds to spin, more than 0");
		pin_to_cpu(0);
		printf("spin=%.0f/s\n", busy_loop(secs) / secs);
		return 0;
	}
	if (argc == 3 && !strcmp(argv[1], "cost"))
		return cost(atof(argv[2]));
	setvbuf(stdout, NULL, _IOLBF, 0);
	printf("\n");	/* the firmwares leave the console mid-line */
	check_group_parameter();
	if (system("insmod /phasewatch.ko"))
		fail("insmod");
	check_device(0600);
	check_read_only();
	fd = open(DEV, O_RDWR);
	if (fd < 0)
		fail("open: %s", strerror(errno));
	fd2 = open(DEV, O_RDWR);
	if (fd2 >= 0 || errno != EBUSY)
		fail("second open: %s, want EBUSY", fd2 >= 0 ? "succeeded" : strerror(errno));
	check_refusals(fd);
	c = config(1, 0, 256, 0);
	configure(fd, &c);
	check_dontcopy(fd, &c);
	check_memory_cap(fd, cap, sizeof(cap));
	race_fd = fd;
	in_child_within(races, 30, "ioctl against mmap");
	check_sampling(fd, sampling, sizeof(sampling));
	check_lost(fd, lost, sizeof(lost));
	check_hotplug(fd, hotplug, sizeof(hotplug));
	check_idle(fd, idle, sizeof(idle));
	close(fd);
	in_child(new_pid_namespace, "new pid namespace");
	fd = open(DEV, O_RDWR);
	if (fd < 0)
		fail("open after the first reader closed: %s", strerror(errno));
	close(fd);
	if (system("rmmod phasewatch") || module_loaded() || access(DEV, F_OK) == 0)
		fail("rmmod");
	printf("PASS %s %s %s %s %s races=ok pidns=ok\n", sampling, lost, hotplug, idle, cap);
	return 0;
}
