/* SPDX-License-Identifier: GPL-2.0 WITH Linux-syscall-note */
/*
 * phasewatch ABI: the ioctls of /dev/phasewatch and the layout of the
 * per-CPU sample rings it maps read-only into the reader.
 *
 * Mapping: one ring per CPU; ring c starts at file offset c * ring_bytes,
 * where ring_bytes = PW_HEADER_BYTES + nr_records * sizeof(struct pw_record)
 * rounded up to the page size (struct pw_config.ring_bytes after configure).
 */
#ifndef _UAPI_PHASEWATCH_H
#define _UAPI_PHASEWATCH_H

#include <linux/ioctl.h>
#include <linux/types.h>

#define PW_ABI_VERSION		1
#define PW_RING_MAGIC		0x31525750u	/* "PWR1" */
#define PW_HEADER_BYTES		4096
#define PW_CPU_WORDS		16		/* cpu mask: 1024 CPUs */
#define PW_MISSING		(~(__u64)0)	/* value not read */

/* MSR set: bit i of pw_config.msr_mask reads allowlist entry i. */
enum pw_msr {
	PW_MSR_PERF_STATUS,	/* 0x198 */
	PW_MSR_MPERF,		/* 0xE7 */
	PW_MSR_APERF,		/* 0xE8 */
	PW_MSR_PPERF,		/* 0x64E */
	PW_MSR_TSC,		/* 0x10; without it the TSC comes from rdtsc */
	PW_MSR_C3,		/* 0x3FC */
	PW_MSR_C6,		/* 0x3FD */
	PW_MSR_C7,		/* 0x3FE */
	PW_NR_MSRS
};
#define PW_MSR_ALL		((1u << PW_NR_MSRS) - 1)

#define PW_DEFAULT_PERIOD_NS	1000000ull
#define PW_MIN_PERIOD_NS	100000ull
#define PW_MAX_PERIOD_NS	1000000000ull
#define PW_DEFAULT_INTERVAL	100000000ull
#define PW_DEFAULT_RECORDS	4096
#define PW_MAX_RECORDS		(1u << 20)

struct pw_config {
	__u64 cpu_mask[PW_CPU_WORDS];	/* CPUs to watch; at least one */
	__u64 period_ns;		/* 0: 1 ms */
	__u64 interval_insns;		/* 0: 100M retired instructions */
	__u32 target_tgid;		/* 0: all tasks (needs CAP_PERFMON) */
	__u32 msr_mask;			/* in: bits below PW_NR_MSRS only;
					 * out: those every probed CPU has */
	__u32 nr_records;		/* per CPU, power of two; 0: 4096 */
	__u32 watermark;		/* wake at this fill; 0: nr_records / 2 */
	__u64 ring_bytes;		/* out: bytes of one CPU's ring */
	__u64 reserved[2];		/* must be 0 */
};

/* pw_record.flags */
#define PW_REC_USER		(1u << 0)	/* ip is a user IP of tid */
#define PW_REC_TARGET		(1u << 1)	/* tid belongs to the target */

struct pw_record {
	__u64 t_ns;		/* CLOCK_MONOTONIC */
	__u64 ip;		/* 0 unless PW_REC_USER */
	__u64 tsc;
	__u64 perf_status;	/* MSRs as read, PW_MISSING if not */
	__u64 aperf;
	__u64 mperf;
	__u64 pperf;
	__u64 c3;
	__u64 c6;
	__u64 c7;
	__u64 instructions;	/* PW_MISSING without a hardware PMU */
	__u64 cycles;
	__u64 interval;		/* interval ends seen on this CPU so far */
	__u32 cpu;
	__u32 pid;		/* tgid, in the configuring reader's pid namespace */
	__u32 tid;		/* 0 if the task is not visible there */
	__u32 flags;
	__u64 reserved;
};

/*
 * The first PW_HEADER_BYTES of each ring; written by the module only.
 * Record i lives at slot i % nr_records.  Readable records are
 * [tail, head); when head - tail == nr_records, new samples are dropped
 * and counted in lost, never written over unread ones.
 */
struct pw_ring_header {
	__u32 magic;
	__u32 version;
	__u32 record_size;
	__u32 nr_records;
	__u32 cpu;
	__u32 online;		/* 1 while this CPU is being sampled */
	__u64 head;		/* records written, ever */
	__u64 tail;		/* records released by PW_IOC_CONSUME */
	__u64 lost;		/* samples dropped on a full ring */
	__u64 intervals;	/* interval ends on this CPU */
};

/* pw_stats.clock */
#define PW_CLOCK_NONE		0
#define PW_CLOCK_INSTRUCTIONS	1	/* hardware retired-instruction counter */
#define PW_CLOCK_SOFTWARE	2	/* no PMU: cpu-clock, 1 ns per instruction */

struct pw_stats {
	__u64 ticks;		/* timer expiries on watched CPUs */
	__u64 records;		/* records written */
	__u64 lost;		/* records dropped on full rings */
	__u64 skipped;		/* ticks when the target was not running */
	__u64 intervals;	/* interval ends */
	__u64 msr_faults;	/* rdmsr_safe failures */
	__u64 missed;		/* periods skipped by a late timer */
	__u32 clock;		/* PW_CLOCK_*: what ends intervals */
	__u32 running;
	__u32 nr_cpus;		/* CPUs sampled now */
	__u32 reserved;
};

struct pw_consume {
	__u32 cpu;
	__u32 reserved;
	__u64 tail;		/* new tail: old tail <= tail <= head */
};

/*
 * 0xBD: not in Documentation/userspace-api/ioctl/ioctl-number.rst (0xB7 is
 * nsfs and remoteproc, 0xB8 mshv, 0xBA liveupdate).  Entry for that table:
 * 0xBD  01-0F  phasewatch_uapi.h  phasewatch sampler (out of tree)
 */
#define PW_IOC_MAGIC		0xBD
#define PW_IOC_CONFIGURE	_IOWR(PW_IOC_MAGIC, 1, struct pw_config)
#define PW_IOC_START		_IO(PW_IOC_MAGIC, 2)
#define PW_IOC_STOP		_IO(PW_IOC_MAGIC, 3)
#define PW_IOC_STATS		_IOR(PW_IOC_MAGIC, 4, struct pw_stats)
#define PW_IOC_CONSUME		_IOW(PW_IOC_MAGIC, 5, struct pw_consume)

#endif /* _UAPI_PHASEWATCH_H */
