/* _litmus_hunt.c: the futex hunt between two processes (futex_hunt), part of the ringcast_lab._litmus
 * extension: included by _litmus.c (one translation unit: the fence points, shapes and helpers
 * above it in that file are shared). */

struct hunt {
    struct slot arrive[2];
    uint32_t flag __attribute__((aligned(LINE)));
    uint32_t waiters __attribute__((aligned(LINE)));
    uint32_t seq __attribute__((aligned(LINE)));
    uint32_t abort __attribute__((aligned(LINE)));
    uint32_t stop;
    uint32_t outcome; /* the waiter's last iteration, below */
    uint64_t sleeps, rechecks, errors, yielded;
};

enum { O_RECHECK = 1, O_WOKEN, O_TIMEOUT_FLAG_SET, O_TIMEOUT_FLAG_CLEAR };

struct hunt_result {
    uint64_t done, sleeps, rechecks, wakes, woken, timeouts_flag_set, lost, late, errors, yielded;
    int aborted, child_status;
};

static pid_t hunt_child;

#define FORCE_PARK 64 /* one round in this many publishes only once the waiter has announced */

static int
hunt_child_alive(void)
{
    int st;
    return waitpid(hunt_child, &st, WNOHANG) == 0;
}

static int
parent_alive(void)
{
    return getppid() != 1;
}

/* The waiter: ParkSnapshot, ParkAnnounce (F6W), ParkRecheck, ParkSleep, ParkRetire. */
static void
hunt_waiter(struct hunt *h, double deadline, const struct timespec *sleep_ts)
{
    uint64_t gen = 0;
    for (;;) {
        int b = barrier(h->arrive, &h->abort, 1, ++gen, deadline, parent_alive);
        if (b < 0 || __atomic_load_n(&h->stop, __ATOMIC_ACQUIRE))
            return;
        h->yielded += (uint64_t)b;
        uint32_t s = rc_load_u32(&h->seq);
        rc_fetch_add_u32(&h->waiters, 1);
        uint32_t o;
        if (ld(&h->flag)) {
            o = O_RECHECK;
            h->rechecks++;
        } else {
            int rc = rc_futex_wait(&h->seq, s, sleep_ts);
            h->sleeps++;
            if (rc < 0)
                h->errors++;
            o = rc == 2 ? (ld(&h->flag) ? O_TIMEOUT_FLAG_SET : O_TIMEOUT_FLAG_CLEAR) : O_WOKEN;
        }
        rc_fetch_add_u32(&h->waiters, (uint32_t)-1);
        h->outcome = o;
        if (barrier(h->arrive, &h->abort, 1, ++gen, deadline, parent_alive) < 0)
            return;
    }
}

/* The notifier (this process) against a forked waiter; ctl: the control of F6N. */
static int
futex_hunt(int ctl, uint64_t iterations, double budget_s, double sleep_timeout_s, struct hunt_result *res)
{
    struct timespec ts;
    double deadline = now_s() + budget_s;
    uint64_t gen = 0;
    uint32_t rng = 2463534242u, lag = 0;
    int fd, status = 0;
    pid_t parent = getpid();
    memset(res, 0, sizeof *res);
    ts.tv_sec = (time_t)sleep_timeout_s;
    ts.tv_nsec = (long)((sleep_timeout_s - (double)ts.tv_sec) * 1e9);
    fd = (int)syscall(SYS_memfd_create, "ringcast-litmus-hunt", 1u /* MFD_CLOEXEC */);
    if (fd < 0)
        return errno;
    if (ftruncate(fd, sizeof(struct hunt)) < 0) {
        int e = errno;
        close(fd);
        return e;
    }
    struct hunt *h = mmap(NULL, sizeof(struct hunt), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd); /* the mapping keeps the memfd alive; it vanishes with the last mapping */
    if (h == MAP_FAILED)
        return errno;
    memset(h, 0, sizeof *h);
    hunt_child = fork();
    if (hunt_child < 0) {
        int e = errno;
        munmap(h, sizeof *h);
        return e;
    }
    if (hunt_child == 0) {
        /* only async-signal-safe work from here: no malloc, no Python */
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (getppid() != parent)
            _exit(3);
        hunt_waiter(h, deadline + GRACE_S + sleep_timeout_s + 1.0, &ts);
        _exit(0);
    }
    for (;;) {
        int b = barrier(h->arrive, &h->abort, 0, ++gen, deadline + GRACE_S + sleep_timeout_s, hunt_child_alive);
        if (b < 0 || h->stop)
            break;
        res->yielded += (uint64_t)b;
        /* Hold the publish back by `lag` steps (+ a little noise): `lag` grows while the waiter's
         * re-check sees the flag and shrinks while it sleeps, so the publish keeps landing where the
         * waiter announces, the window in which a missing fence loses the wake-up. */
        rng ^= rng << 13;
        rng ^= rng >> 17;
        rng ^= rng << 5;
        for (volatile uint32_t d = lag + rng % 8; d > 0; d--)
            ;
        /* Every FORCE_PARK-th round the publish waits for the waiter's announce, so that the sleep
         * and the wake are exercised however the machine is loaded (a loaded machine deschedules
         * the waiter at the barrier, every round then yields and `lag` never learns: the hunt could
         * run 50,000 rounds without one sleep, and its test's verdict hung on the load). */
        if (gen % (2 * FORCE_PARK) == 1)
            while (!__atomic_load_n(&h->waiters, __ATOMIC_ACQUIRE) && hunt_child_alive() && now_s() < deadline + GRACE_S)
                sched_yield();
        st(&h->flag, 1); /* the publishing store */
        uint32_t n = notify_load_waiters(&h->waiters, ctl ? P_F6N : P_NONE);
        if (n) {
            rc_fetch_add_u32(&h->seq, 1);
            long woken = rc_futex_wake(&h->seq, INT_MAX);
            res->wakes++;
            if (woken > 0)
                res->woken += (uint64_t)woken;
            else if (woken < 0)
                res->errors++;
        }
        if (barrier(h->arrive, &h->abort, 0, ++gen, deadline + GRACE_S + sleep_timeout_s, hunt_child_alive) < 0)
            break;
        res->done++;
        if (h->outcome == O_TIMEOUT_FLAG_SET) {
            res->timeouts_flag_set++;
            if (n == 0)
                res->lost++; /* it slept past the publish and nobody was going to wake it */
            else
                res->late++; /* the notifier saw it, but its wake came after the timeout */
        }
        if (b) /* the waiter was not running when we started: its outcome says nothing about lag */
            ;
        else if (h->outcome == O_RECHECK)
            lag += lag < 20000;
        else if (lag > 0)
            lag--;
        st(&h->flag, 0);
        __atomic_store_n(&h->stop, res->done >= iterations || now_s() > deadline, __ATOMIC_RELEASE);
    }
    if (__atomic_load_n(&h->abort, __ATOMIC_RELAXED) && !h->stop)
        res->aborted = 1;
    /* the child leaves at the stop flag or on the abort; make sure it is gone either way */
    __atomic_store_n(&h->abort, 1, __ATOMIC_RELAXED);
    for (int k = 0; k < 2000; k++) {
        if (waitpid(hunt_child, &status, WNOHANG) != 0)
            goto reaped;
        struct timespec pause = {0, 1000000};
        nanosleep(&pause, NULL);
    }
    kill(hunt_child, SIGKILL);
    waitpid(hunt_child, &status, 0);
    res->aborted = 1;
reaped:
    res->child_status = status;
    res->sleeps = h->sleeps;
    res->rechecks = h->rechecks;
    res->errors += h->errors;
    res->yielded = res->yielded + h->yielded < res->done ? res->yielded + h->yielded : res->done;
    munmap(h, sizeof *h);
    return 0;
}
