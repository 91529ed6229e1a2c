/*
 * first-clock: the peers rows' program (bench/peers_program.rs builds it).
 *
 * Its first act is to read CLOCK_REALTIME; then it writes
 * "first-clock <nanoseconds since the epoch>\n" to stdout and exits 0.
 * Static, no libc, no loader: nothing runs in it before the clock is read,
 * so the time from a caller's start to that reading is what a sandbox
 * costs to reach a program's first instruction (plus one system call).
 *
 * CLOCK_REALTIME, not CLOCK_MONOTONIC: a peer may give the program a clock
 * of its own (a time namespace, gVisor's sentry), and the wall clock is
 * the one every peer shares with the host. The raw system call, not the
 * vDSO, since finding the vDSO needs the auxiliary vector's parsing.
 */

struct timespec_raw {
    long sec;
    long nsec;
};

#if defined(__x86_64__)
#define NR_WRITE 1
#define NR_CLOCK_GETTIME 228
#define NR_EXIT_GROUP 231
static long sys3(long n, long a, long b, long c)
{
    long r;
    __asm__ volatile("syscall"
                     : "=a"(r)
                     : "a"(n), "D"(a), "S"(b), "d"(c)
                     : "rcx", "r11", "memory");
    return r;
}
#elif defined(__aarch64__)
#define NR_WRITE 64
#define NR_CLOCK_GETTIME 113
#define NR_EXIT_GROUP 94
static long sys3(long n, long a, long b, long c)
{
    register long x8 __asm__("x8") = n;
    register long x0 __asm__("x0") = a;
    register long x1 __asm__("x1") = b;
    register long x2 __asm__("x2") = c;
    __asm__ volatile("svc 0" : "+r"(x0) : "r"(x8), "r"(x1), "r"(x2) : "memory");
    return x0;
}
#else
#error "first-clock: x86_64 or aarch64 only"
#endif

/* The entry point itself (no crt): force_align_arg_pointer because the
 * kernel enters with the stack 16-byte aligned, not as after a call. */
__attribute__((noreturn, force_align_arg_pointer, used)) void _start(void)
{
    struct timespec_raw now;
    long failed = sys3(NR_CLOCK_GETTIME, 0 /* CLOCK_REALTIME */, (long)&now, 0);
    static const char prefix[] = "first-clock ";
    char line[48];
    int at = 0;
    while (prefix[at]) {
        line[at] = prefix[at];
        at++;
    }
    if (failed) {
        line[at++] = '?';
    } else {
        unsigned long ns = (unsigned long)now.sec * 1000000000UL + (unsigned long)now.nsec;
        char digits[24];
        int n = 0;
        do {
            digits[n++] = (char)('0' + ns % 10);
            ns /= 10;
        } while (ns);
        while (n)
            line[at++] = digits[--n];
    }
    line[at++] = '\n';
    sys3(NR_WRITE, 1, (long)line, at);
    sys3(NR_EXIT_GROUP, failed ? 1 : 0, 0, 0);
    for (;;) {
    }
}
