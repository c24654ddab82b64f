/* The `phasewatchd` command: starts the daemon (phasewatch.cli.phasewatchd)
 * with SIGHUP blocked.
 *
 * Python takes tens of milliseconds to start before the daemon can take
 * SIGHUPs; a SIGHUP in that time would end the process (its default
 * action).  A blocked signal stays blocked, and one that arrives
 * stays pending, across execve (an ignored one would be lost), so this
 * launcher blocks SIGHUP first thing and then becomes the interpreter: the
 * daemon keeps SIGHUP blocked and takes it with sigwait on a thread of its
 * own, and a SIGHUP that came during start-up is then a reload.
 *
 * On x86-64 the launcher has no C library: its entry point blocks SIGHUP with
 * its first system call, before any page of a library is touched (the C
 * library's own start-up, statically linked, leaves a SIGHUP fatal for about
 * half a millisecond on a small VM).  What is left is the kernel finishing the
 * execve of this file: a SIGHUP sent while the caller still waits for that
 * acts on the caller's disposition, as for any program.
 *
 * PYTHON (the interpreter's absolute path) is given at build time.
 */
#include <signal.h>

#ifndef PYTHON
#error "build with -DPYTHON='\"/path/to/python\"'"
#endif

/* -P: the current folder is not put on the module path (a file there named
 * like a module must not be run by the daemon). */
#define N_FIRST 4
#define FIRST_ARGS PYTHON, "-P", "-c", \
    "import sys; from phasewatch.cli.phasewatchd import main; sys.exit(main())"
#define CANNOT_RUN "phasewatchd: cannot run " PYTHON ": install phasewatch again (make install)\n"

#if defined(__x86_64__)
#include <asm/unistd.h>

static long syscall3(long nr, long a, long b, long c)
{
    long ret;
    register long sigset_size __asm__("r10") = sizeof(unsigned long);
    __asm__ volatile ("syscall" : "=a"(ret) : "a"(nr), "D"(a), "S"(b), "d"(c), "r"(sigset_size)
                      : "rcx", "r11", "memory");
    return ret;
}

/* The kernel's initial stack: argc, argv[0..argc-1], NULL, envp..., NULL. */
__attribute__((used, noreturn)) void launch(long *stack)
{
    unsigned long hup = 1UL << (SIGHUP - 1);
    syscall3(__NR_rt_sigprocmask, SIG_BLOCK, (long)&hup, 0);

    long argc = stack[0];
    char **argv = (char **)(stack + 1);
    char **envp = argv + argc + 1;
    const char *args[N_FIRST + argc];
    const char *first[N_FIRST] = {FIRST_ARGS};
    for (long i = 0; i < N_FIRST; i++)
        args[i] = first[i];
    for (long i = 1; i <= argc; i++)            /* argv[argc] is the NULL */
        args[N_FIRST - 1 + i] = argv[i];
    syscall3(__NR_execve, (long)PYTHON, (long)args, (long)envp);
    static const char message[] = CANNOT_RUN;
    syscall3(__NR_write, 2, (long)message, sizeof message - 1);
    syscall3(__NR_exit_group, 127, 0, 0);
    __builtin_unreachable();
}

__asm__(".text\n.globl _start\n_start:\n"
        "  xor %rbp, %rbp\n  mov %rsp, %rdi\n  and $-16, %rsp\n  call launch\n  hlt\n");

#else
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

int main(int argc, char **argv)
{
    sigset_t hup;
    sigemptyset(&hup);
    sigaddset(&hup, SIGHUP);
    sigprocmask(SIG_BLOCK, &hup, NULL);

    const char *first[N_FIRST] = {FIRST_ARGS};
    char **args = calloc(N_FIRST + (size_t)argc, sizeof *args);
    if (args == NULL)
        return 1;
    memcpy(args, first, sizeof first);
    memcpy(args + N_FIRST, argv + 1, (size_t)argc * sizeof *args);   /* with the NULL */
    execv(PYTHON, args);
    fputs(CANNOT_RUN, stderr);
    return 127;
}
#endif
