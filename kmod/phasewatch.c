// SPDX-License-Identifier: GPL-2.0
/*
 * phasewatch: sample MSRs, counters and user IPs on watched CPUs, each from
 * a pinned hrtimer on the CPU itself, into per-CPU rings of fixed-size
 * records that one reader maps read-only.  MSRs are only ever read, with
 * rdmsr_safe, from a fixed allowlist.  Interval ends come from a perf
 * retired-instructions counter; the PMU is never programmed by hand.
 */
#include <linux/bitops.h>
#include <linux/cpu.h>
#include <linux/cpuhotplug.h>
#include <linux/hrtimer.h>
#include <linux/irq_work.h>
#include <linux/miscdevice.h>
#include <linux/mm.h>
#include <linux/module.h>
#include <linux/perf_event.h>
#include <linux/pid.h>
#include <linux/poll.h>
#include <linux/sched.h>
#include <linux/slab.h>
#include <linux/uaccess.h>
#include <linux/version.h>
#include <linux/vmalloc.h>
#include <asm/irq_regs.h>
#include <asm/msr.h>
#include "phasewatch_uapi.h"

static int group = -1;
module_param(group, int, 0444);
MODULE_PARM_DESC(group, "gid given rw access to /dev/phasewatch (mode 0660); -1: root only (0600)");

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

struct pw_cpu {
	struct pw_ring_header *hdr;	/* vmalloc_user: header page, then records */
	struct pw_record *rec;
	struct hrtimer timer;
	struct perf_event *insns;	/* ends intervals; hardware or cpu-clock */
	struct perf_event *cycles;
	struct irq_work wake;
	u64 ticks, missed, skipped, msr_faults;
	u32 clock;
	int error;			/* why the CPU could not be sampled */
	bool interval_pending;
};

static DEFINE_MUTEX(pw_lock);
static DECLARE_WAIT_QUEUE_HEAD(pw_wq);
static unsigned long pw_busy;
static atomic_t pw_maps = ATOMIC_INIT(0);
static struct pw_config pw_cfg;
static struct pw_cpu *pw_cpus;		/* nr_cpu_ids entries once configured */
static struct cpumask pw_mask;
static size_t pw_ring_bytes;
static int pw_hp_state = -1;		/* cpuhp state while running */

static u64 pw_count(struct perf_event *e)
{
	if (!e)
		return PW_MISSING;
	if (READ_ONCE(e->state) == PERF_EVENT_STATE_ACTIVE &&
	    READ_ONCE(e->oncpu) == smp_processor_id())
		e->pmu->read(e);
	return local64_read(&e->count);
}

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
		if (!(pw_cfg.msr_mask & BIT(i)))
			continue;
		if (rdmsr_safe(pw_msr_addr[i], &lo, &hi))
			pc->msr_faults++;
		else
			*slot[i] = (u64)hi << 32 | lo;
	}
	if (!(pw_cfg.msr_mask & BIT(PW_MSR_TSC)))
		r->tsc = rdtsc();
}

static void pw_sample(struct pw_cpu *pc)
{
	struct pw_ring_header *h = pc->hdr;
	struct pt_regs *regs = get_irq_regs();
	struct task_struct *t = current;
	bool target = !pw_cfg.target_tgid || t->tgid == pw_cfg.target_tgid;
	u64 head = h->head, fill = head - READ_ONCE(h->tail);
	struct pw_record *r;

	if (!target) {
		pc->skipped++;
		return;
	}
	if (fill >= h->nr_records) {
		WRITE_ONCE(h->lost, h->lost + 1);
		return;
	}
	r = &pc->rec[head & (h->nr_records - 1)];
	r->t_ns = ktime_get_ns();
	pw_read_msrs(pc, r);
	r->instructions = pc->clock == PW_CLOCK_INSTRUCTIONS ? pw_count(pc->insns) : PW_MISSING;
	r->cycles = pw_count(pc->cycles);
	r->interval = READ_ONCE(h->intervals);
	r->cpu = smp_processor_id();
	r->pid = t->tgid;
	r->tid = t->pid;
	r->flags = PW_REC_TARGET;
	r->ip = 0;
	if (regs && user_mode(regs)) {
		r->ip = instruction_pointer(regs);
		r->flags |= PW_REC_USER;
	}
	r->reserved = 0;
	smp_store_release(&h->head, head + 1);
	if (fill + 1 == pw_cfg.watermark)
		irq_work_queue(&pc->wake);
}

static enum hrtimer_restart pw_tick(struct hrtimer *timer)
{
	struct pw_cpu *pc = container_of(timer, struct pw_cpu, timer);

	pc->ticks++;
	pw_sample(pc);
	pc->missed += hrtimer_forward_now(timer, ns_to_ktime(pw_cfg.period_ns)) - 1;
	return HRTIMER_RESTART;
}

/* May run in NMI context: no locks, defer the wake-up. */
static void pw_interval_end(struct perf_event *e, struct perf_sample_data *data,
			    struct pt_regs *regs)
{
	struct pw_cpu *pc = e->overflow_handler_context;

	WRITE_ONCE(pc->hdr->intervals, pc->hdr->intervals + 1);
	WRITE_ONCE(pc->interval_pending, true);
	irq_work_queue(&pc->wake);
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
		e = pw_counter(cpu, PERF_TYPE_SOFTWARE, PERF_COUNT_SW_CPU_CLOCK,
			       pw_cfg.interval_insns, pc);
		pc->clock = PW_CLOCK_SOFTWARE;
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

/*
 * cpuhp callbacks: run on @cpu itself, so the timer is armed where it samples.
 * A CPU that cannot be sampled still comes online; start reports the error.
 */
static int pw_cpu_online(unsigned int cpu)
{
	struct pw_cpu *pc = &pw_cpus[cpu];

	if (!cpumask_test_cpu(cpu, &pw_mask))
		return 0;
	pc->error = pw_open_counters(pc, cpu);
	if (pc->error)
		return 0;
	hrtimer_init(&pc->timer, CLOCK_MONOTONIC, HRTIMER_MODE_REL_PINNED_HARD);
	pc->timer.function = pw_tick;
	WRITE_ONCE(pc->hdr->online, 1);
	hrtimer_start(&pc->timer, ns_to_ktime(pw_cfg.period_ns),
		      HRTIMER_MODE_REL_PINNED_HARD);
	return 0;
}

static int pw_cpu_offline(unsigned int cpu)
{
	struct pw_cpu *pc = &pw_cpus[cpu];

	if (!cpumask_test_cpu(cpu, &pw_mask) || !pc->hdr->online)
		return 0;
	hrtimer_cancel(&pc->timer);
	pw_close_counters(pc);
	irq_work_sync(&pc->wake);
	WRITE_ONCE(pc->hdr->online, 0);
	return 0;
}

static void pw_free_rings(void)
{
	int cpu;

	if (!pw_cpus)
		return;
	for_each_cpu(cpu, &pw_mask)
		vfree(pw_cpus[cpu].hdr);
	kfree(pw_cpus);
	pw_cpus = NULL;
	cpumask_clear(&pw_mask);
}

static int pw_alloc_rings(void)
{
	int cpu;

	pw_cpus = kcalloc(nr_cpu_ids, sizeof(*pw_cpus), GFP_KERNEL);
	if (!pw_cpus)
		return -ENOMEM;
	for_each_cpu(cpu, &pw_mask) {
		struct pw_cpu *pc = &pw_cpus[cpu];
		struct pw_ring_header *h = vmalloc_user(pw_ring_bytes);

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
	}
	return 0;
}

static int pw_check_mask(struct pw_config *c)
{
	int w, bit;

	cpumask_clear(&pw_mask);
	for (w = 0; w < PW_CPU_WORDS; w++) {
		for (bit = 0; bit < 64; bit++) {
			unsigned int cpu = w * 64 + bit;

			if (!(c->cpu_mask[w] & BIT_ULL(bit)))
				continue;
			if (cpu >= nr_cpu_ids || !cpu_possible(cpu))
				return -EINVAL;
			cpumask_set_cpu(cpu, &pw_mask);
		}
	}
	return cpumask_empty(&pw_mask) ? -EINVAL : 0;
}

/* The tgid as the timer sees it (initial namespace); 0 stays "all tasks". */
static int pw_global_tgid(u32 tgid, u32 *out)
{
	struct task_struct *t;

	*out = 0;
	if (!tgid)
		return 0;
	rcu_read_lock();
	t = pid_task(find_vpid(tgid), PIDTYPE_TGID);
	if (t)
		*out = task_tgid_nr(t);
	rcu_read_unlock();
	return *out ? 0 : -EINVAL;
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
	return pw_global_tgid(c->target_tgid, &c->target_tgid);
}

static long pw_configure(struct pw_config __user *uc)
{
	struct pw_config c;
	u32 user_tgid;
	int err;

	if (copy_from_user(&c, uc, sizeof(c)))
		return -EFAULT;
	if (pw_hp_state >= 0 || atomic_read(&pw_maps))
		return -EBUSY;
	pw_free_rings();
	user_tgid = c.target_tgid;
	err = pw_fill_defaults(&c) ?: pw_check_mask(&c);
	if (err)
		return err;
	pw_cfg = c;
	pw_ring_bytes = PAGE_ALIGN(PW_HEADER_BYTES +
				   (size_t)c.nr_records * sizeof(struct pw_record));
	err = pw_alloc_rings();
	if (err) {
		pw_free_rings();
		return err;
	}
	c.ring_bytes = pw_ring_bytes;
	c.target_tgid = user_tgid;
	return copy_to_user(uc, &c, sizeof(c)) ? -EFAULT : 0;
}

static int pw_first_error(void)
{
	int cpu;

	for_each_cpu(cpu, &pw_mask)
		if (pw_cpus[cpu].error)
			return pw_cpus[cpu].error;
	return 0;
}

static long pw_stop(void)
{
	if (pw_hp_state >= 0)
		cpuhp_remove_state(pw_hp_state);
	pw_hp_state = -1;
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
	state = cpuhp_setup_state(CPUHP_AP_ONLINE_DYN, "misc/phasewatch:online",
				  pw_cpu_online, pw_cpu_offline);
	if (state < 0)
		return state;
	pw_hp_state = state;
	err = pw_first_error();
	if (err)
		pw_stop();
	return err;
}

static long pw_stats(struct pw_stats __user *us)
{
	struct pw_stats s = { .running = pw_hp_state >= 0 };
	int cpu;

	if (!pw_cpus)
		return -EINVAL;
	for_each_cpu(cpu, &pw_mask) {
		struct pw_cpu *pc = &pw_cpus[cpu];

		s.ticks += READ_ONCE(pc->ticks);
		s.skipped += READ_ONCE(pc->skipped);
		s.msr_faults += READ_ONCE(pc->msr_faults);
		s.missed += READ_ONCE(pc->missed);
		s.records += READ_ONCE(pc->hdr->head);
		s.lost += READ_ONCE(pc->hdr->lost);
		s.intervals += READ_ONCE(pc->hdr->intervals);
		s.nr_cpus += READ_ONCE(pc->hdr->online);
		s.clock = max(s.clock, pc->clock);
	}
	return copy_to_user(us, &s, sizeof(s)) ? -EFAULT : 0;
}

static long pw_consume(struct pw_consume __user *uc)
{
	struct pw_consume c;
	struct pw_ring_header *h;

	if (copy_from_user(&c, uc, sizeof(c)))
		return -EFAULT;
	if (!pw_cpus || c.reserved || c.cpu >= nr_cpu_ids ||
	    !cpumask_test_cpu(c.cpu, &pw_mask))
		return -EINVAL;
	h = pw_cpus[c.cpu].hdr;
	if (c.tail < h->tail || c.tail > smp_load_acquire(&h->head))
		return -EINVAL;
	WRITE_ONCE(pw_cpus[c.cpu].interval_pending, false);
	smp_store_release(&h->tail, c.tail);
	return 0;
}

static long pw_ioctl(struct file *f, unsigned int cmd, unsigned long arg)
{
	void __user *p = (void __user *)arg;
	long ret;

	mutex_lock(&pw_lock);
	switch (cmd) {
	case PW_IOC_CONFIGURE:
		ret = pw_configure(p);
		break;
	case PW_IOC_START:
		ret = pw_start();
		break;
	case PW_IOC_STOP:
		ret = pw_stop();
		break;
	case PW_IOC_STATS:
		ret = pw_stats(p);
		break;
	case PW_IOC_CONSUME:
		ret = pw_consume(p);
		break;
	default:
		ret = -ENOTTY;
	}
	mutex_unlock(&pw_lock);
	return ret;
}

static bool pw_readable(void)
{
	int cpu;

	for_each_cpu(cpu, &pw_mask) {
		struct pw_cpu *pc = &pw_cpus[cpu];
		u64 fill = READ_ONCE(pc->hdr->head) - READ_ONCE(pc->hdr->tail);

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

static int pw_map_ring(struct vm_area_struct *vma)
{
	unsigned long pages = pw_ring_bytes >> PAGE_SHIFT;
	unsigned long cpu = vma->vm_pgoff / pages;
	int err;

	if (vma->vm_flags & VM_WRITE)
		return -EPERM;
	if (vma->vm_end - vma->vm_start != pw_ring_bytes ||
	    vma->vm_pgoff % pages || cpu >= nr_cpu_ids ||
	    !cpumask_test_cpu(cpu, &pw_mask))
		return -EINVAL;
	err = remap_vmalloc_range(vma, pw_cpus[cpu].hdr, 0);
	if (err)
		return err;
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 3, 0)
	vm_flags_clear(vma, VM_MAYWRITE);
#else
	vma->vm_flags &= ~VM_MAYWRITE;
#endif
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

/* One reader at a time: a second opener gets -EBUSY. */
static int pw_open(struct inode *inode, struct file *f)
{
	return test_and_set_bit(0, &pw_busy) ? -EBUSY : 0;
}

/* Runs after the last close and the last munmap, so no mapping outlives the rings. */
static int pw_release(struct inode *inode, struct file *f)
{
	mutex_lock(&pw_lock);
	pw_stop();
	pw_free_rings();
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
