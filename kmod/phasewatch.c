// SPDX-License-Identifier: GPL-2.0
/*
 * phasewatch: sample MSRs, counters and user IPs on watched CPUs, each from
 * a pinned hrtimer on the CPU itself, into per-CPU rings of fixed-size
 * records that one reader maps read-only.  MSRs are only ever read, with
 * rdmsr_safe, from a fixed allowlist.  Interval ends come from a perf
 * retired-instructions counter; the PMU is never programmed by hand.
 */
#include <linux/bitops.h>
#include <linux/capability.h>
#include <linux/cpu.h>
#include <linux/cpuhotplug.h>
#include <linux/cred.h>
#include <linux/hrtimer.h>
#include <linux/irq_work.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/perf_event.h>
#include <linux/pid.h>
#include <linux/pid_namespace.h>
#include <linux/poll.h>
#include <linux/sched.h>
#include <linux/sched/coredump.h>
#include <linux/sched/mm.h>
#include <linux/sched/signal.h>
#include <linux/sched/task.h>
#include <linux/slab.h>
#include <linux/tracepoint.h>
#include <linux/uaccess.h>
#include <linux/version.h>
#include <linux/vmalloc.h>
#include <asm/irq_regs.h>
#include <asm/msr.h>
#include "phasewatch_uapi.h"

static int group = -1;
module_param(group, int, 0444);
MODULE_PARM_DESC(group, "gid allowed to open /dev/phasewatch (mode 0660); -1: root only (0600). Grants no privilege beyond open");

static unsigned long ring_limit_kb;
module_param(ring_limit_kb, ulong, 0644);
MODULE_PARM_DESC(ring_limit_kb, "cap on the ring memory of one configuration, in KiB; 0 at load: 1% of RAM");

static const u32 pw_msr_addr[PW_NR_MSRS] = {
	[PW_MSR_PERF_STATUS]	= 0x198,
	[PW_MSR_MPERF]		= 0xe7,
	[PW_MSR_APERF]		= 0xe8,
	[PW_MSR_PPERF]		= 0x64e,
	[PW_MSR_TSC]		= 0x10,
	[PW_MSR_C3]		= 0x3fc,
	[PW_MSR_C6]		= 0x3fd,
	[PW_MSR_C7]		= 0x3fe,
};

/*
 * One watched CPU.  head, tail, lost and intervals are the module's own
 * copies; the header page the reader maps only receives them, so nothing the
 * reader could change is ever read back.  Each field has one writer: the
 * CPU's own timer or perf handler, or the ioctl for tail.
 */
struct pw_cpu {
	struct pw_ring_header *hdr;	/* vmap of pages: header page, then records */
	struct pw_record *rec;
	struct page **pages;		/* charged to the configuring task's memcg */
	unsigned int nr_pages;
	struct hrtimer timer;
	struct perf_event *insns;	/* ends intervals; hardware or cpu-clock */
	struct perf_event *cycles;
	struct irq_work wake;
	u64 head, tail, lost, intervals;
	u64 ticks, missed, skipped, msr_faults;
	u64 run_ns;			/* target mode without a PMU: target time in this interval */
	u32 msrs;			/* MSRs this CPU has: probed once */
	u32 clock;
	int error;			/* why the CPU could not be sampled */
	bool probed, armed, interval_pending;
} ____cacheline_aligned_in_smp;

static DEFINE_MUTEX(pw_lock);
static DECLARE_WAIT_QUEUE_HEAD(pw_wq);
static unsigned long pw_busy;
static atomic_t pw_maps = ATOMIC_INIT(0);
static struct pw_config pw_cfg;
static struct pw_cpu *pw_cpus;		/* nr_cpu_ids entries once configured */
static struct cpumask pw_mask;
static size_t pw_ring_bytes;
static int pw_hp_state = -1;		/* cpuhp state while running */
static bool pw_perfmon;			/* the opener was perfmon_capable() */
static struct pid *pw_target;		/* NULL: all tasks */
static struct pid_namespace *pw_ns;	/* the configuring reader's */
static struct tracepoint *pw_switch_tp;	/* sched_switch, found at load */
static bool pw_switch_hooked;

/*
 * perf_event_read_local() is not exported to modules (6.1, 6.12), so read
 * through the PMU's own read callback, and only an event that is active on
 * this CPU: anything else (off, in error, multiplexed out) is missing rather
 * than a stale count.
 */
static u64 pw_count(struct perf_event *e)
{
	if (!e || READ_ONCE(e->state) != PERF_EVENT_STATE_ACTIVE ||
	    READ_ONCE(e->oncpu) != smp_processor_id())
		return PW_MISSING;
	e->pmu->read(e);
	return local64_read(&e->count);
}

/* Reads only the MSRs this CPU was found to have. */
static void pw_read_msrs(struct pw_cpu *pc, struct pw_record *r)
{
	u64 *slot[PW_NR_MSRS] = {
		&r->perf_status, &r->mperf, &r->aperf, &r->pperf,
		&r->tsc, &r->c3, &r->c6, &r->c7,
	};
	int i;

	for (i = 0; i < PW_NR_MSRS; i++) {
		u32 lo, hi;

		*slot[i] = PW_MISSING;
		if (!(pc->msrs & BIT(i)))
			continue;
		if (rdmsr_safe(pw_msr_addr[i], &lo, &hi))
			WRITE_ONCE(pc->msr_faults, pc->msr_faults + 1);
		else
			*slot[i] = (u64)hi << 32 | lo;
	}
	if (!(pc->msrs & BIT(PW_MSR_TSC)))
		r->tsc = rdtsc();
}

static bool pw_is_target(struct task_struct *t)
{
	return !pw_target || task_tgid(t) == pw_target;
}

static void pw_sample(struct pw_cpu *pc)
{
	struct pw_ring_header *h = pc->hdr;
	struct pt_regs *regs = get_irq_regs();
	struct task_struct *t = current;
	u64 head = pc->head, fill = head - smp_load_acquire(&pc->tail);
	struct pw_record *r;

	if (!pw_is_target(t)) {
		WRITE_ONCE(pc->skipped, pc->skipped + 1);
		return;
	}
	if (fill >= pw_cfg.nr_records) {
		WRITE_ONCE(pc->lost, pc->lost + 1);
		WRITE_ONCE(h->lost, pc->lost);
		return;
	}
	r = &pc->rec[head & (pw_cfg.nr_records - 1)];
	r->t_ns = ktime_get_ns();
	pw_read_msrs(pc, r);
	r->instructions = pc->clock == PW_CLOCK_INSTRUCTIONS ? pw_count(pc->insns) : PW_MISSING;
	r->cycles = pw_count(pc->cycles);
	r->interval = READ_ONCE(pc->intervals);
	r->cpu = smp_processor_id();
	r->pid = task_tgid_nr_ns(t, pw_ns);
	r->tid = task_pid_nr_ns(t, pw_ns);
	r->flags = PW_REC_TARGET;
	r->ip = 0;
	if (regs && user_mode(regs)) {
		r->ip = instruction_pointer(regs);
		r->flags |= PW_REC_USER;
	}
	r->reserved = 0;
	WRITE_ONCE(pc->head, head + 1);
	smp_store_release(&h->head, head + 1);
	if (fill + 1 == pw_cfg.watermark)
		irq_work_queue(&pc->wake);
}

static void pw_mark_interval(struct pw_cpu *pc)
{
	WRITE_ONCE(pc->intervals, pc->intervals + 1);
	WRITE_ONCE(pc->hdr->intervals, pc->intervals);
	WRITE_ONCE(pc->interval_pending, true);
	irq_work_queue(&pc->wake);
}

static enum hrtimer_restart pw_tick(struct hrtimer *timer)
{
	struct pw_cpu *pc = container_of(timer, struct pw_cpu, timer);
	u64 overruns;

	WRITE_ONCE(pc->ticks, pc->ticks + 1);
	pw_sample(pc);
	overruns = hrtimer_forward_now(timer, ns_to_ktime(pw_cfg.period_ns));
	WRITE_ONCE(pc->missed, pc->missed + overruns - 1);
	if (!pc->insns) {
		pc->run_ns += overruns * pw_cfg.period_ns;
		while (pc->run_ns >= pw_cfg.interval_insns) {
			pc->run_ns -= pw_cfg.interval_insns;
			pw_mark_interval(pc);
		}
	}
	return HRTIMER_RESTART;
}

/*
 * Target mode: a CPU's timer runs only while a thread of the target runs
 * there, so a CPU whose target sleeps takes no interrupt from the module.
 * Runs in the scheduler, on @prev's CPU, with interrupts off, so the timer
 * callback cannot be running and cancelling cannot wait.
 */
static void pw_on_switch(void *data, bool preempt, struct task_struct *prev,
			 struct task_struct *next, unsigned int prev_state)
{
	unsigned int cpu = smp_processor_id();
	struct pw_cpu *pc;
	bool in, was;

	if (!cpumask_test_cpu(cpu, &pw_mask))
		return;
	pc = &pw_cpus[cpu];
	if (!READ_ONCE(pc->armed))
		return;
	in = pw_is_target(next);
	was = pw_is_target(prev);
	if (in && !was)
		hrtimer_start(&pc->timer, ns_to_ktime(pw_cfg.period_ns),
			      HRTIMER_MODE_REL_PINNED_HARD);
	else if (was && !in)
		hrtimer_try_to_cancel(&pc->timer);
}

static void pw_find_switch_tp(struct tracepoint *tp, void *priv)
{
	if (!strcmp(tp->name, "sched_switch"))
		pw_switch_tp = tp;
}

/* May run in NMI context: no locks, defer the wake-up. */
static void pw_interval_end(struct perf_event *e, struct perf_sample_data *data,
			    struct pt_regs *regs)
{
	pw_mark_interval(e->overflow_handler_context);
}

static void pw_wake(struct irq_work *w)
{
	wake_up_interruptible(&pw_wq);
}

static struct perf_event *pw_counter(int cpu, u32 type, u64 config, u64 period,
				     struct pw_cpu *pc)
{
	struct perf_event_attr attr = {
		.type		= type,
		.size		= sizeof(attr),
		.config		= config,
		.sample_period	= period,
		.pinned		= 1,
	};

	return perf_event_create_kernel_counter(&attr, cpu, NULL,
						period ? pw_interval_end : NULL, pc);
}

static bool pw_no_pmu(struct perf_event *e)
{
	return PTR_ERR(e) == -ENOENT || PTR_ERR(e) == -EOPNOTSUPP;
}

static int pw_open_counters(struct pw_cpu *pc, int cpu)
{
	struct perf_event *e;

	e = pw_counter(cpu, PERF_TYPE_HARDWARE, PERF_COUNT_HW_INSTRUCTIONS,
		       pw_cfg.interval_insns, pc);
	pc->clock = PW_CLOCK_INSTRUCTIONS;
	if (IS_ERR(e) && pw_no_pmu(e)) {
		pc->clock = PW_CLOCK_SOFTWARE;
		/*
		 * In target mode the sampling timer, which runs only while the
		 * target does, counts the target's time; a cpu-clock event would
		 * wake an idle CPU every interval.
		 */
		if (pw_target)
			return 0;
		e = pw_counter(cpu, PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK,
			       pw_cfg.interval_insns, pc);
	}
	if (IS_ERR(e))
		return PTR_ERR(e);
	pc->insns = e;

	e = pw_counter(cpu, PERF_TYPE_HARDWARE, PERF_COUNT_HW_CPU_CYCLES, 0, pc);
	pc->cycles = IS_ERR(e) ? NULL : e;
	return 0;
}

static void pw_close_counters(struct pw_cpu *pc)
{
	if (pc->insns)
		perf_event_release_kernel(pc->insns);
	if (pc->cycles)
		perf_event_release_kernel(pc->cycles);
	pc->insns = NULL;
	pc->cycles = NULL;
}

/* Which of the requested MSRs @cpu has; on the CPU itself, so rdmsr_safe. */
static u32 pw_probe_local(u32 wanted)
{
	u32 have = 0, lo, hi;
	int i;

	for (i = 0; i < PW_NR_MSRS; i++)
		if ((wanted & BIT(i)) && !rdmsr_safe(pw_msr_addr[i], &lo, &hi))
			have |= BIT(i);
	return have;
}

static void pw_timer_init(struct hrtimer *timer)
{
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 13, 0)
	hrtimer_setup(timer, pw_tick, CLOCK_MONOTONIC, HRTIMER_MODE_REL_PINNED_HARD);
#else
	hrtimer_init(timer, CLOCK_MONOTONIC, HRTIMER_MODE_REL_PINNED_HARD);
	timer->function = pw_tick;
#endif
}

/*
 * cpuhp callbacks: run on @cpu itself, so the timer is armed where it samples.
 * A CPU that cannot be sampled still comes online; start reports the error.
 * In target mode the timer starts when a target thread is switched in.
 */
static int pw_cpu_online(unsigned int cpu)
{
	struct pw_cpu *pc = &pw_cpus[cpu];

	if (!cpumask_test_cpu(cpu, &pw_mask))
		return 0;
	if (!pc->probed) {
		pc->msrs = pw_probe_local(pw_cfg.msr_mask);
		pc->probed = true;
	}
	pc->error = pw_open_counters(pc, cpu);
	if (pc->error)
		return 0;
	pc->run_ns = 0;
	pw_timer_init(&pc->timer);
	WRITE_ONCE(pc->hdr->online, 1);
	WRITE_ONCE(pc->armed, true);
	if (!pw_target)
		hrtimer_start(&pc->timer, ns_to_ktime(pw_cfg.period_ns),
			      HRTIMER_MODE_REL_PINNED_HARD);
	return 0;
}

static int pw_cpu_offline(unsigned int cpu)
{
	struct pw_cpu *pc = &pw_cpus[cpu];

	if (!cpumask_test_cpu(cpu, &pw_mask) || !pc->armed)
		return 0;
	WRITE_ONCE(pc->armed, false);
	hrtimer_cancel(&pc->timer);
	pw_close_counters(pc);
	irq_work_sync(&pc->wake);
	WRITE_ONCE(pc->hdr->online, 0);
	return 0;
}

static void pw_free_ring(struct pw_cpu *pc)
{
	unsigned int i;

	if (pc->hdr)
		vunmap(pc->hdr);
	for (i = 0; i < pc->nr_pages; i++)
		__free_page(pc->pages[i]);
	kvfree(pc->pages);
	pc->hdr = NULL;
	pc->pages = NULL;
	pc->nr_pages = 0;
}

static void pw_free_rings(void)
{
	int cpu;

	if (pw_cpus) {
		for_each_cpu(cpu, &pw_mask)
			pw_free_ring(&pw_cpus[cpu]);
		kfree(pw_cpus);
		pw_cpus = NULL;
	}
	cpumask_clear(&pw_mask);
	put_pid(pw_target);
	pw_target = NULL;
	if (pw_ns)
		put_pid_ns(pw_ns);
	pw_ns = NULL;
}

/* Pages on @cpu's node, charged to the caller's memory cgroup. */
static int pw_alloc_ring(struct pw_cpu *pc, int cpu)
{
	unsigned int i, n = pw_ring_bytes >> PAGE_SHIFT;
	int node = cpu_to_node(cpu);
	struct pw_ring_header *h;

	pc->pages = kvcalloc(n, sizeof(*pc->pages), GFP_KERNEL_ACCOUNT);
	if (!pc->pages)
		return -ENOMEM;
	for (i = 0; i < n; i++) {
		pc->pages[i] = alloc_pages_node(node, GFP_KERNEL_ACCOUNT | __GFP_ZERO, 0);
		if (!pc->pages[i])
			return -ENOMEM;
		pc->nr_pages = i + 1;
	}
	h = vmap(pc->pages, n, VM_MAP, PAGE_KERNEL);
	if (!h)
		return -ENOMEM;
	h->magic = PW_RING_MAGIC;
	h->version = PW_ABI_VERSION;
	h->record_size = sizeof(struct pw_record);
	h->nr_records = pw_cfg.nr_records;
	h->cpu = cpu;
	pc->hdr = h;
	pc->rec = (void *)h + PW_HEADER_BYTES;
	init_irq_work(&pc->wake, pw_wake);
	return 0;
}

static int pw_alloc_rings(void)
{
	int cpu, err;

	pw_cpus = kcalloc(nr_cpu_ids, sizeof(*pw_cpus), GFP_KERNEL_ACCOUNT);
	if (!pw_cpus)
		return -ENOMEM;
	for_each_cpu(cpu, &pw_mask) {
		err = pw_alloc_ring(&pw_cpus[cpu], cpu);
		if (err)
			return err;
	}
	return 0;
}

/*
 * Probe each online watched CPU once for the requested MSRs; CPUs offline
 * now are probed when they come online.  Returns the MSRs all probed CPUs have.
 */
static u32 pw_probe_msrs(u32 wanted)
{
	u32 common = wanted;
	int cpu;

	cpus_read_lock();
	for_each_cpu_and(cpu, &pw_mask, cpu_online_mask) {
		struct pw_cpu *pc = &pw_cpus[cpu];
		u32 lo, hi;
		int i;

		pc->msrs = 0;
		for (i = 0; i < PW_NR_MSRS; i++)
			if ((wanted & BIT(i)) &&
			    !rdmsr_safe_on_cpu(cpu, pw_msr_addr[i], &lo, &hi))
				pc->msrs |= BIT(i);
		pc->probed = true;
		common &= pc->msrs;
	}
	cpus_read_unlock();
	return common;
}

static int pw_check_mask(const struct pw_config *c, struct cpumask *mask)
{
	int w, bit;

	cpumask_clear(mask);
	for (w = 0; w < PW_CPU_WORDS; w++) {
		for (bit = 0; bit < 64; bit++) {
			unsigned int cpu = w * 64 + bit;

			if (!(c->cpu_mask[w] & BIT_ULL(bit)))
				continue;
			if (cpu >= nr_cpu_ids || !cpu_possible(cpu))
				return -EINVAL;
			cpumask_set_cpu(cpu, mask);
		}
	}
	return cpumask_empty(mask) ? -EINVAL : 0;
}

/*
 * May the caller sample @task without CAP_PERFMON?  The test of
 * __ptrace_may_access() for PTRACE_MODE_READ_FSCREDS, which modules cannot
 * call (ptrace_may_access() is not exported): same uids and gids by the
 * caller's fs credentials, or CAP_SYS_PTRACE over the target's user
 * namespace; and a dumpable mm.  LSM ptrace hooks (Yama) are not consulted.
 */
static bool pw_may_trace(struct task_struct *task)
{
	const struct cred *cred = current_cred(), *tcred;
	struct mm_struct *mm;
	bool ok;

	if (same_thread_group(task, current))
		return true;
	if (task->flags & PF_KTHREAD)
		return false;
	rcu_read_lock();
	tcred = __task_cred(task);
	ok = (uid_eq(cred->fsuid, tcred->euid) && uid_eq(cred->fsuid, tcred->suid) &&
	      uid_eq(cred->fsuid, tcred->uid) && gid_eq(cred->fsgid, tcred->egid) &&
	      gid_eq(cred->fsgid, tcred->sgid) && gid_eq(cred->fsgid, tcred->gid)) ||
	     ns_capable(tcred->user_ns, CAP_SYS_PTRACE);
	rcu_read_unlock();
	if (!ok)
		return false;
	mm = get_task_mm(task);
	if (mm) {
		ok = get_dumpable(mm) == SUID_DUMP_USER || ns_capable(mm->user_ns, CAP_SYS_PTRACE);
		mmput(mm);
	}
	return ok;
}

/* The target as a pid reference in the caller's namespace; NULL: all tasks. */
static int pw_get_target(u32 tgid, struct pid **out)
{
	struct task_struct *task = NULL;
	struct pid *pid;
	bool ok;

	*out = NULL;
	if (!tgid)
		return pw_perfmon ? 0 : -EACCES;
	pid = find_get_pid(tgid);
	if (!pid)
		return -EINVAL;
	rcu_read_lock();
	task = pid_task(pid, PIDTYPE_TGID);
	if (task)
		get_task_struct(task);
	rcu_read_unlock();
	if (!task) {
		put_pid(pid);
		return -EINVAL;
	}
	ok = pw_perfmon || pw_may_trace(task);
	put_task_struct(task);
	if (!ok) {
		put_pid(pid);
		return -EACCES;
	}
	*out = pid;
	return 0;
}

static int pw_fill_defaults(struct pw_config *c)
{
	if (c->reserved[0] || c->reserved[1] || c->msr_mask & ~PW_MSR_ALL)
		return -EINVAL;
	if (!c->period_ns)
		c->period_ns = PW_DEFAULT_PERIOD_NS;
	if (c->period_ns < PW_MIN_PERIOD_NS || c->period_ns > PW_MAX_PERIOD_NS)
		return -EINVAL;
	if (!c->interval_insns)
		c->interval_insns = PW_DEFAULT_INTERVAL;
	if (c->interval_insns < 1000000 || c->interval_insns > (1ull << 62))
		return -EINVAL;
	if (!c->nr_records)
		c->nr_records = PW_DEFAULT_RECORDS;
	if (c->nr_records < 2 || c->nr_records > PW_MAX_RECORDS ||
	    !is_power_of_2(c->nr_records))
		return -EINVAL;
	if (!c->watermark)
		c->watermark = c->nr_records / 2;
	if (c->watermark > c->nr_records)
		return -EINVAL;
	return 0;
}

static size_t pw_ring_size(const struct pw_config *c)
{
	return PAGE_ALIGN(PW_HEADER_BYTES + (size_t)c->nr_records * sizeof(struct pw_record));
}

/* Validates @c fully before the old configuration is given up. */
static long pw_configure(struct pw_config *c)
{
	cpumask_var_t mask;
	struct pid *target;
	u64 total;
	int err;

	if (pw_hp_state >= 0 || atomic_read(&pw_maps))
		return -EBUSY;
	if (!zalloc_cpumask_var(&mask, GFP_KERNEL))
		return -ENOMEM;
	err = pw_fill_defaults(c) ?: pw_check_mask(c, mask);
	total = (u64)cpumask_weight(mask) * pw_ring_size(c);
	if (!err && total > (u64)READ_ONCE(ring_limit_kb) * 1024)
		err = -ENOMEM;
	if (!err)
		err = pw_get_target(c->target_tgid, &target);
	if (err) {
		free_cpumask_var(mask);
		return err;
	}

	pw_free_rings();
	pw_cfg = *c;
	cpumask_copy(&pw_mask, mask);
	free_cpumask_var(mask);
	pw_target = target;
	pw_ns = get_pid_ns(task_active_pid_ns(current));
	pw_ring_bytes = pw_ring_size(c);
	err = pw_alloc_rings();
	if (err) {
		pw_free_rings();
		return err;
	}
	c->msr_mask = pw_probe_msrs(c->msr_mask);
	c->ring_bytes = pw_ring_bytes;
	return 0;
}

static int pw_first_error(void)
{
	int cpu;

	for_each_cpu(cpu, &pw_mask)
		if (pw_cpus[cpu].error)
			return pw_cpus[cpu].error;
	return 0;
}

static void pw_unhook_switch(void)
{
	if (!pw_switch_hooked)
		return;
	tracepoint_probe_unregister(pw_switch_tp, (void *)pw_on_switch, NULL);
	tracepoint_synchronize_unregister();
	pw_switch_hooked = false;
}

static long pw_stop(void)
{
	if (pw_hp_state >= 0)
		cpuhp_remove_state(pw_hp_state);
	pw_hp_state = -1;
	pw_unhook_switch();
	wake_up_interruptible(&pw_wq);
	return 0;
}

static long pw_start(void)
{
	int state, err;

	if (!pw_cpus)
		return -EINVAL;
	if (pw_hp_state >= 0)
		return -EBUSY;
	if (pw_target) {
		if (!pw_switch_tp)
			return -EOPNOTSUPP;
		err = tracepoint_probe_register(pw_switch_tp, (void *)pw_on_switch, NULL);
		if (err)
			return err;
		pw_switch_hooked = true;
	}
	state = cpuhp_setup_state(CPUHP_AP_ONLINE_DYN, "misc/phasewatch:online",
				  pw_cpu_online, pw_cpu_offline);
	if (state < 0) {
		pw_unhook_switch();
		return state;
	}
	pw_hp_state = state;
	err = pw_first_error();
	if (err)
		pw_stop();
	return err;
}

static long pw_stats(struct pw_stats *s)
{
	int cpu;

	if (!pw_cpus)
		return -EINVAL;
	memset(s, 0, sizeof(*s));
	s->running = pw_hp_state >= 0;
	for_each_cpu(cpu, &pw_mask) {
		struct pw_cpu *pc = &pw_cpus[cpu];

		s->ticks += READ_ONCE(pc->ticks);
		s->skipped += READ_ONCE(pc->skipped);
		s->msr_faults += READ_ONCE(pc->msr_faults);
		s->missed += READ_ONCE(pc->missed);
		s->records += READ_ONCE(pc->head);
		s->lost += READ_ONCE(pc->lost);
		s->intervals += READ_ONCE(pc->intervals);
		s->nr_cpus += READ_ONCE(pc->armed);
		s->clock = max(s->clock, pc->clock);
	}
	return 0;
}

static long pw_consume(const struct pw_consume *c)
{
	struct pw_cpu *pc;

	if (!pw_cpus || c->reserved || c->cpu >= nr_cpu_ids ||
	    !cpumask_test_cpu(c->cpu, &pw_mask))
		return -EINVAL;
	pc = &pw_cpus[c->cpu];
	if (c->tail < pc->tail || c->tail > READ_ONCE(pc->head))
		return -EINVAL;
	WRITE_ONCE(pc->interval_pending, false);
	smp_store_release(&pc->tail, c->tail);
	WRITE_ONCE(pc->hdr->tail, c->tail);
	return 0;
}

/*
 * Arguments are copied in before pw_lock is taken and results copied out
 * after it is dropped: a fault on the user buffer takes mmap_lock, and mmap
 * takes pw_lock under mmap_lock.
 */
static long pw_ioctl(struct file *f, unsigned int cmd, unsigned long arg)
{
	void __user *p = (void __user *)arg;
	union {
		struct pw_config cfg;
		struct pw_stats stats;
		struct pw_consume consume;
	} u;
	long ret;

	switch (cmd) {
	case PW_IOC_CONFIGURE:
	case PW_IOC_START:
	case PW_IOC_STOP:
		if (!(f->f_mode & FMODE_WRITE))
			return -EBADF;
	}
	switch (cmd) {
	case PW_IOC_CONFIGURE:
		if (copy_from_user(&u.cfg, p, sizeof(u.cfg)))
			return -EFAULT;
		mutex_lock(&pw_lock);
		ret = pw_configure(&u.cfg);
		mutex_unlock(&pw_lock);
		if (!ret && copy_to_user(p, &u.cfg, sizeof(u.cfg)))
			ret = -EFAULT;
		return ret;
	case PW_IOC_START:
		mutex_lock(&pw_lock);
		ret = pw_start();
		mutex_unlock(&pw_lock);
		return ret;
	case PW_IOC_STOP:
		mutex_lock(&pw_lock);
		ret = pw_stop();
		mutex_unlock(&pw_lock);
		return ret;
	case PW_IOC_STATS:
		mutex_lock(&pw_lock);
		ret = pw_stats(&u.stats);
		mutex_unlock(&pw_lock);
		if (!ret && copy_to_user(p, &u.stats, sizeof(u.stats)))
			ret = -EFAULT;
		return ret;
	case PW_IOC_CONSUME:
		if (copy_from_user(&u.consume, p, sizeof(u.consume)))
			return -EFAULT;
		mutex_lock(&pw_lock);
		ret = pw_consume(&u.consume);
		mutex_unlock(&pw_lock);
		return ret;
	}
	return -ENOTTY;
}

static bool pw_readable(void)
{
	int cpu;

	for_each_cpu(cpu, &pw_mask) {
		struct pw_cpu *pc = &pw_cpus[cpu];
		u64 fill = READ_ONCE(pc->head) - READ_ONCE(pc->tail);

		if (fill >= pw_cfg.watermark)
			return true;
		if (fill && (READ_ONCE(pc->interval_pending) || pw_hp_state < 0))
			return true;
	}
	return false;
}

static __poll_t pw_poll(struct file *f, poll_table *wait)
{
	__poll_t mask = 0;

	poll_wait(f, &pw_wq, wait);
	mutex_lock(&pw_lock);
	if (pw_cpus && pw_readable())
		mask = EPOLLIN | EPOLLRDNORM;
	mutex_unlock(&pw_lock);
	return mask;
}

static void pw_vm_open(struct vm_area_struct *vma)
{
	atomic_inc(&pw_maps);
}

static void pw_vm_close(struct vm_area_struct *vma)
{
	atomic_dec(&pw_maps);
}

static const struct vm_operations_struct pw_vm_ops = {
	.open	= pw_vm_open,
	.close	= pw_vm_close,
};

/* Read-only, never executable, not inherited by fork. */
static int pw_map_ring(struct vm_area_struct *vma)
{
	unsigned long pages = pw_ring_bytes >> PAGE_SHIFT;
	unsigned long cpu = vma->vm_pgoff / pages;
	int err;

	if (vma->vm_flags & (VM_WRITE | VM_EXEC))
		return -EPERM;
	if (vma->vm_end - vma->vm_start != pw_ring_bytes ||
	    vma->vm_pgoff % pages || cpu >= nr_cpu_ids ||
	    !cpumask_test_cpu(cpu, &pw_mask))
		return -EINVAL;
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
	vm_flags_mod(vma, VM_DONTCOPY | VM_DONTEXPAND, VM_MAYWRITE | VM_MAYEXEC);
#else
	vma->vm_flags |= VM_DONTCOPY | VM_DONTEXPAND;
	vma->vm_flags &= ~(VM_MAYWRITE | VM_MAYEXEC);
#endif
	err = vm_map_pages_zero(vma, pw_cpus[cpu].pages, pw_cpus[cpu].nr_pages);
	if (err)
		return err;
	vma->vm_ops = &pw_vm_ops;
	pw_vm_open(vma);
	return 0;
}

static int pw_mmap(struct file *f, struct vm_area_struct *vma)
{
	int err = -EINVAL;

	mutex_lock(&pw_lock);
	if (pw_cpus)
		err = pw_map_ring(vma);
	mutex_unlock(&pw_lock);
	return err;
}

/*
 * One reader at a time: a second opener gets -EBUSY.  The device's mode and
 * group only decide who reaches open; what the opener may sample is decided
 * by its capabilities at open (all tasks, other users' tasks: CAP_PERFMON or
 * CAP_SYS_ADMIN) and at configure (its own tasks, as ptrace would allow).
 */
static int pw_open(struct inode *inode, struct file *f)
{
	if (test_and_set_bit(0, &pw_busy))
		return -EBUSY;
	pw_perfmon = perfmon_capable();
	return 0;
}

/* Runs after the last close and the last munmap, so no mapping outlives the rings. */
static int pw_release(struct inode *inode, struct file *f)
{
	mutex_lock(&pw_lock);
	pw_stop();
	pw_free_rings();
	pw_perfmon = false;
	mutex_unlock(&pw_lock);
	clear_bit(0, &pw_busy);
	return 0;
}

static const struct file_operations pw_fops = {
	.owner		= THIS_MODULE,
	.open		= pw_open,
	.release	= pw_release,
	.unlocked_ioctl	= pw_ioctl,
	.compat_ioctl	= compat_ptr_ioctl,
	.mmap		= pw_mmap,
	.poll		= pw_poll,
	.llseek		= noop_llseek,
};

static struct miscdevice pw_dev = {
	.minor	= MISC_DYNAMIC_MINOR,
	.name	= "phasewatch",
	.fops	= &pw_fops,
	.mode	= 0600,
};

static int __init pw_init(void)
{
	BUILD_BUG_ON(sizeof(struct pw_record) != 128);
	BUILD_BUG_ON(sizeof(struct pw_ring_header) > PW_HEADER_BYTES);
	if (group >= 0)
		pw_dev.mode = 0660;
	if (!ring_limit_kb)
		ring_limit_kb = totalram_pages() * (PAGE_SIZE / 1024) / 100;
	for_each_kernel_tracepoint(pw_find_switch_tp, NULL);
	return misc_register(&pw_dev);
}

static void __exit pw_exit(void)
{
	misc_deregister(&pw_dev);
}

module_init(pw_init);
module_exit(pw_exit);

MODULE_LICENSE("GPL");
MODULE_DESCRIPTION("phasewatch: per-CPU MSR and IP sampling for program-phase detection");
