/* ringcast._litmus: litmus tests of every fence shape the protocol relies on, run on this CPU.
 *
 * The TLA+ models (spec/) prove the protocol correct *given* that each fence point is a full
 * fence; this module checks, on the machine in front of it, that the shipped primitives of
 * ringcast_fences.h (the very inline functions ringcast._atomics wraps for the Python code) stop
 * the reordering each fence point is there for. Two threads meet at a spin barrier before every
 * iteration and run one shape on fresh words (one word per iteration, in batches), in tight
 * compiled loops, as litmus7 (herdtools) and jcstress do. Plain protocol accesses (the payload,
 * written, the read flags: plain Python stores into the mapping) are relaxed atomics here, which
 * compile to plain loads and stores.
 *
 * Shapes (docs/spec.md, "Litmus tests"; F-names as in docs/protocol.md, "Fences"):
 *   eventcount   notifier: flag = 1; F6N+load waiters -> r0  |  waiter: F6W RMW waiters += 1; r1 = flag
 *                forbidden r0 == 0 && r1 == 0 (each misses the other: a lost wake-up)
 *   mp           writer: payload = 1; F3; written = 1       |  reader: w = written; F4; p = payload
 *                forbidden w == 1 && p == 0 (the new flag with an old payload)
 *   mp_readflag  writer: payload = 1; F7; read flag = 0     |  reader: f = read flag; F4; p = payload
 *                forbidden f == 0 && p == 0 (the cleared flag with an old payload)
 *   rtr          reader: p = payload; F5; read = 1          |  writer: c = read; F1; payload = 2
 *                forbidden c == 1 && p == 2 (the reader saw bytes written after its own release)
 * A run is either shipped (every fence as ringcast ships it) or the control of one fence point:
 * that one fence replaced by a compiler-only barrier, to show how often this CPU produces the
 * forbidden outcome when nothing stops it.
 *
 * futex_hunt runs the parking protocol itself with the real futex, between two processes over a
 * shared memfd: the waiter announces (F6W), re-checks the flag and sleeps with a short timeout; the
 * notifier publishes the flag, F6N, loads waiters and wakes. A lost wake-up is a sleep that ended
 * by its timeout while the flag was set *and* the notifier had seen no waiter.
 *
 * Test-only switches, one per call-site fence point (F6N and F6W: see ringcast_fences.h):
 * -DRINGCAST_TEST_DROP_F1 / _F3 / _F4 / _F5 / _F7 turn that point's fence into a compiler barrier
 * in the shipped runs. setup.py never passes them; build_info()["dropped"] names any that is set.
 * -DRINGCAST_LITMUS_STANDALONE builds a command-line program instead of the Python module
 * (tests/test_litmus.py builds throwaway copies that way).
 */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE 1
#endif
#ifndef RINGCAST_LITMUS_STANDALONE
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#endif
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include "ringcast_fences.h"

/* ------------------------------------------------------------------ fence points and shapes -- */

enum { P_NONE = 0, P_F1, P_F3, P_F4, P_F5, P_F6N, P_F6W, P_F7, N_POINTS };
static const char *const POINT_NAMES[N_POINTS] = {"", "F1", "F3", "F4", "F5", "F6N", "F6W", "F7"};

#ifdef RINGCAST_TEST_DROP_F1
#define DROP_F1 1
#else
#define DROP_F1 0
#endif
#ifdef RINGCAST_TEST_DROP_F3
#define DROP_F3 1
#else
#define DROP_F3 0
#endif
#ifdef RINGCAST_TEST_DROP_F4
#define DROP_F4 1
#else
#define DROP_F4 0
#endif
#ifdef RINGCAST_TEST_DROP_F5
#define DROP_F5 1
#else
#define DROP_F5 0
#endif
#ifdef RINGCAST_TEST_DROP_F7
#define DROP_F7 1
#else
#define DROP_F7 0
#endif

/* The fence points whose fence this build compiled out ("" in a shipped build). */
static const char DROPPED[] = RC_DROPPED_IN_HEADER
#if DROP_F1
    "F1 "
#endif
#if DROP_F3
    "F3 "
#endif
#if DROP_F4
    "F4 "
#endif
#if DROP_F5
    "F5 "
#endif
#if DROP_F7
    "F7 "
#endif
    "";

/* A ring fence point (a call of ringcast.atomics.fence(), i.e. rc_fence()); in the control of
 * that point (or where a test-only switch dropped it) a compiler-only barrier. */
RC_INLINE void
at_point(int point, int ctl)
{
    int drop = (point == P_F1 && DROP_F1) || (point == P_F3 && DROP_F3) || (point == P_F4 && DROP_F4) ||
               (point == P_F5 && DROP_F5) || (point == P_F7 && DROP_F7);
    if (point == ctl || drop)
        rc_compiler_barrier();
    else
        rc_fence();
}

/* F6N + NotifyLoadWaiters as shipped, or its control (no fence before the load). */
RC_INLINE uint32_t
notify_load_waiters(uint32_t *w, int ctl)
{
    if (ctl == P_F6N) {
        rc_compiler_barrier();
        return rc_load_u32(w);
    }
    return rc_fence_load_u32(w);
}

/* ParkAnnounce (F6W) as shipped, or its control (the seq_cst RMW alone). */
RC_INLINE void
park_announce(uint32_t *w, int ctl)
{
    if (ctl == P_F6W) {
        rc_rmw_add_u32(w, 1);
        rc_compiler_barrier();
    } else {
        rc_fetch_add_u32(w, 1);
    }
}

RC_INLINE void
st(uint32_t *p, uint32_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
}

RC_INLINE uint32_t
ld(uint32_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

enum { S_EVENTCOUNT, S_MP, S_MP_READFLAG, S_RTR, N_SHAPES };

struct shape_info {
    const char *name;
    int points[2];
    uint32_t flag_init;
    const char *forbidden;
};

static const struct shape_info SHAPES[N_SHAPES] = {
    {"eventcount", {P_F6N, P_F6W}, 0,
     "r0 == 0 && r1 == 0: the notifier saw no waiter and the waiter's re-check missed the publish (a lost wake-up)"},
    {"mp", {P_F3, P_F4}, 0, "written == 1 && payload == old: the reader copies the previous message"},
    {"mp_readflag", {P_F7, P_F4}, 1, "read flag cleared && payload == old: the reader copies the previous message"},
    {"rtr", {P_F5, P_F1}, 0, "read == 1 seen by the claim && the reader loaded the next payload: a torn copy"},
};

/* ---------------------------------------------------------------------- the two-thread runs -- */

#define BATCH 4096
#define LINE 64
#define GRACE_S 2.0 /* past its budget, how long a side waits at a barrier before the run is aborted */
#define SPINS_BEFORE_YIELD 2048 /* then sched_yield: the other side may be waiting for our CPU */

struct slot {
    uint64_t v;
    char pad[LINE - sizeof(uint64_t)];
};

struct run {
    struct slot arrive[2];            /* the spin barrier: each side's generation, own line */
    uint32_t stop __attribute__((aligned(LINE)));
    uint32_t abort;
    uint32_t batch_n;
    int shape, ctl;
    double deadline;      /* the budget: no batch starts after it */
    double hard_deadline; /* a side still waiting for the other at a barrier then gives up */
    uint32_t flag[BATCH] __attribute__((aligned(LINE)));
    uint32_t pay[BATCH] __attribute__((aligned(LINE)));
    uint32_t w[BATCH] __attribute__((aligned(LINE)));
    uint32_t r0[BATCH] __attribute__((aligned(LINE)));
    uint32_t r1[BATCH] __attribute__((aligned(LINE)));
};

static double
now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Both sides arrive at generation gen: 0, or 1 when it had to yield the CPU while waiting (the
 * other side was not running at the same time); -1 when the run was aborted (deadline, or the
 * other side is gone: `alive` returns 0). */
static int
barrier(struct slot *arrive, uint32_t *abort, int t, uint64_t gen, double deadline, int (*alive)(void))
{
    unsigned long spins = 0;
    __atomic_store_n(&arrive[t].v, gen, __ATOMIC_RELEASE);
    while (__atomic_load_n(&arrive[1 - t].v, __ATOMIC_ACQUIRE) < gen) {
        if (++spins < SPINS_BEFORE_YIELD)
            continue;
        if (__atomic_load_n(abort, __ATOMIC_RELAXED))
            return -1;
        if (spins % 4096 == 0 && (now_s() > deadline || (alive != NULL && !alive()))) {
            __atomic_store_n(abort, 1, __ATOMIC_RELAXED);
            return -1;
        }
        sched_yield();
    }
    return spins >= SPINS_BEFORE_YIELD;
}

/* One iteration of a shape, side t; shape and ctl are constants after inlining. */
RC_INLINE void
body(struct run *r, int shape, int ctl, int t, uint32_t i)
{
    switch (shape) {
    case S_EVENTCOUNT:
        if (t == 0) { /* notifier */
            st(&r->flag[i], 1);
            r->r0[i] = notify_load_waiters(&r->w[i], ctl);
        } else { /* waiter */
            park_announce(&r->w[i], ctl);
            r->r1[i] = ld(&r->flag[i]);
        }
        break;
    case S_MP:
    case S_MP_READFLAG:
        if (t == 0) { /* writer */
            st(&r->pay[i], 1);
            at_point(shape == S_MP ? P_F3 : P_F7, ctl);
            st(&r->flag[i], shape == S_MP ? 1 : 0);
        } else { /* reader */
            r->r1[i] = ld(&r->flag[i]);
            at_point(P_F4, ctl);
            r->r0[i] = ld(&r->pay[i]);
        }
        break;
    case S_RTR:
        if (t == 0) { /* the writer's next claim */
            r->r0[i] = ld(&r->flag[i]);
            at_point(P_F1, ctl);
            st(&r->pay[i], 2);
        } else { /* the reader's copy and release */
            r->r1[i] = ld(&r->pay[i]);
            at_point(P_F5, ctl);
            st(&r->flag[i], 1);
        }
        break;
    }
}

static int
forbidden(int shape, uint32_t r0, uint32_t r1)
{
    switch (shape) {
    case S_EVENTCOUNT:
        return r0 == 0 && r1 == 0;
    case S_MP:
        return r1 == 1 && r0 == 0;
    case S_MP_READFLAG:
        return r1 == 0 && r0 == 0;
    case S_RTR:
        return r0 == 1 && r1 == 2;
    }
    return 0;
}

/* Runs n iterations; the number whose barrier had to yield, or -1 (aborted). */
RC_INLINE long
iterate(struct run *r, int shape, int ctl, int t, uint32_t n, uint64_t *gen)
{
    long yielded = 0;
    for (uint32_t i = 0; i < n; i++) {
        int b = barrier(r->arrive, &r->abort, t, ++*gen, r->hard_deadline, NULL);
        if (b < 0)
            return -1;
        yielded += b;
        body(r, shape, ctl, t, i);
    }
    return yielded;
}

#define CASE(s, c) \
    case (s) * N_POINTS + (c): return iterate(r, (s), (c), t, n, gen);

static long
iterate_dispatch(struct run *r, int t, uint32_t n, uint64_t *gen)
{
    switch (r->shape * N_POINTS + r->ctl) {
        CASE(S_EVENTCOUNT, P_NONE) CASE(S_EVENTCOUNT, P_F6N) CASE(S_EVENTCOUNT, P_F6W)
        CASE(S_MP, P_NONE) CASE(S_MP, P_F3) CASE(S_MP, P_F4)
        CASE(S_MP_READFLAG, P_NONE) CASE(S_MP_READFLAG, P_F7) CASE(S_MP_READFLAG, P_F4)
        CASE(S_RTR, P_NONE) CASE(S_RTR, P_F5) CASE(S_RTR, P_F1)
    }
    return -1;
}

struct result {
    uint64_t done, forbidden;
    uint64_t yielded[2]; /* per side: iterations whose barrier had to yield the CPU */
    int aborted;
};

struct side {
    struct run *r;
    int t;
    uint64_t iterations;
    int stop_at_first;
    struct result *res;
};

static void *
side_main(void *arg)
{
    struct side *s = arg;
    struct run *r = s->r;
    uint64_t gen = 0;
    for (;;) {
        if (s->t == 0) {
            uint64_t left = s->iterations - s->res->done;
            r->batch_n = left < BATCH ? (uint32_t)left : BATCH;
            for (uint32_t i = 0; i < r->batch_n; i++) {
                r->flag[i] = SHAPES[r->shape].flag_init;
                r->pay[i] = r->w[i] = r->r0[i] = r->r1[i] = 0;
            }
        }
        if (barrier(r->arrive, &r->abort, s->t, ++gen, r->hard_deadline, NULL) < 0)
            break;
        uint32_t n = r->batch_n;
        long y = iterate_dispatch(r, s->t, n, &gen);
        if (y < 0)
            break;
        s->res->yielded[s->t] += (uint64_t)y;
        if (barrier(r->arrive, &r->abort, s->t, ++gen, r->hard_deadline, NULL) < 0)
            break;
        if (s->t == 0) {
            for (uint32_t i = 0; i < n; i++)
                s->res->forbidden += forbidden(r->shape, r->r0[i], r->r1[i]);
            s->res->done += n;
            r->stop = s->res->done >= s->iterations || (s->stop_at_first && s->res->forbidden > 0) ||
                      now_s() > r->deadline;
        }
        if (barrier(r->arrive, &r->abort, s->t, ++gen, r->hard_deadline, NULL) < 0)
            break;
        if (r->stop)
            break;
    }
    if (__atomic_load_n(&r->abort, __ATOMIC_RELAXED))
        s->res->aborted = 1;
    return NULL;
}

/* Run `iterations` of one shape (ctl: P_NONE shipped, or the control of that fence point) for at
 * most budget_s seconds. 0, or an errno value. */
static int
litmus_run(int shape, int ctl, uint64_t iterations, double budget_s, int stop_at_first, struct result *res)
{
    struct run *r;
    pthread_t th;
    int err;
    memset(res, 0, sizeof *res);
    if (posix_memalign((void **)&r, LINE, sizeof *r) != 0)
        return ENOMEM;
    memset(r, 0, sizeof *r);
    r->shape = shape;
    r->ctl = ctl;
    r->deadline = now_s() + budget_s;
    r->hard_deadline = r->deadline + GRACE_S;
    struct side a = {r, 0, iterations, stop_at_first, res}, b = {r, 1, iterations, stop_at_first, res};
    err = pthread_create(&th, NULL, side_main, &b);
    if (err == 0) {
        side_main(&a);
        pthread_join(th, NULL);
    }
    free(r);
    return err;
}

/* Which shape / fence point a name is; -1 if none. */
static int
shape_index(const char *name)
{
    for (int s = 0; s < N_SHAPES; s++)
        if (strcmp(SHAPES[s].name, name) == 0)
            return s;
    return -1;
}

static int
point_index(int shape, const char *name)
{
    if (name == NULL || name[0] == '\0' || strcmp(name, "-") == 0)
        return P_NONE;
    for (int k = 0; k < 2; k++)
        if (strcmp(POINT_NAMES[SHAPES[shape].points[k]], name) == 0)
            return SHAPES[shape].points[k];
    return -1;
}

/* ---------------------------------------------------------- the futex hunt (two processes) -- */

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

/* -------------------------------------------------------------------- the build, described -- */

static __attribute__((noinline)) void
probe_fence(void)
{
    rc_fence();
}

static __attribute__((noinline)) uint32_t
probe_f6n(uint32_t *p)
{
    return rc_fence_load_u32(p);
}

static __attribute__((noinline)) uint32_t
probe_f6w(uint32_t *p)
{
    return rc_fetch_add_u32(p, 1);
}

/* The ordering instructions in a function's first bytes, read from its machine code. */
static void
describe_code(const void *fn, char *out, size_t cap)
{
    const unsigned char *c = fn;
    size_t len = 0;
    out[0] = '\0';
#define ADD(s) \
    do { len += (size_t)snprintf(out + len, len < cap ? cap - len : 0, "%s%s", len ? "; " : "", (s)); } while (0)
#if defined(__x86_64__) || defined(__i386__)
    for (int i = 0; i < 48; i++) {
        if (c[i] == 0x0f && c[i + 1] == 0xae && c[i + 2] == 0xf0)
            ADD("mfence");
        else if (c[i] == 0xf0 && c[i + 1] == 0x48 && c[i + 2] == 0x83 && c[i + 3] == 0x0c && c[i + 4] == 0x24)
            ADD("lock orq $0,(%rsp)");
        else if (c[i] == 0xf0 && c[i + 1] == 0x83 && c[i + 2] == 0x0c && c[i + 3] == 0x24)
            ADD("lock orl $0,(%esp)");
        else if (c[i] == 0xf0 && c[i + 1] == 0x0f && c[i + 2] == 0xc1)
            ADD("lock xadd");
        else if (c[i] == 0xc3)
            break;
    }
#elif defined(__aarch64__)
    const uint32_t *w = fn;
    for (int i = 0; i < 24; i++) {
        uint32_t x = w[i];
        if (x == 0xd5033bbf)
            ADD("dmb ish");
        else if (x == 0xd5033fbf)
            ADD("dmb sy");
        else if (x == 0xd50339bf)
            ADD("dmb ishld");
        else if ((x & 0xfffffc00) == 0x88dffc00)
            ADD("ldar");
        else if ((x & 0xfffffc00) == 0x885ffc00)
            ADD("ldaxr");
        else if ((x & 0xffe0fc00) == 0x8800fc00)
            ADD("stlxr");
        else if ((x & 0xffe0fc00) == 0xb8e00000)
            ADD("ldaddal");
        else if ((x & 0xfc000000) == 0x94000000)
            ADD("bl (outline atomic)");
        else if (x == 0xd65f03c0)
            break;
    }
#else
    ADD("(not decoded on this architecture)");
#endif
    if (len == 0)
        ADD("no fence or locked instruction");
#undef ADD
}

static const char *
arch_name(void)
{
#if defined(__x86_64__)
    return "x86_64";
#elif defined(__aarch64__)
#if defined(__ARM_FEATURE_ATOMICS)
    return "aarch64 (LSE atomics inline)";
#else
    return "aarch64";
#endif
#elif defined(__powerpc64__)
    return "ppc64";
#else
    return "other";
#endif
}

static const char *
compiler_name(void)
{
#if defined(__clang__)
    return "clang " __clang_version__;
#elif defined(__GNUC__)
    return "gcc " __VERSION__;
#else
    return "unknown";
#endif
}

/* ---------------------------------------------------------------------------- front ends -- */

#ifdef RINGCAST_LITMUS_STANDALONE

/* litmus run SHAPE POINT|- ITERATIONS BUDGET_S [stop]   -> "done forbidden aborted yielded"
 * litmus hunt 0|1 ITERATIONS BUDGET_S SLEEP_TIMEOUT_S   -> "done sleeps wakes lost late aborted"
 * litmus info                                           -> one "key: value" per line */
int
main(int argc, char **argv)
{
    if (argc >= 6 && strcmp(argv[1], "run") == 0) {
        struct result res;
        int s = shape_index(argv[2]);
        int p = s < 0 ? -1 : point_index(s, argv[3]);
        if (s < 0 || p < 0) {
            fprintf(stderr, "unknown shape or fence point: %s %s\n", argv[2], argv[3]);
            return 2;
        }
        int err = litmus_run(s, p, strtoull(argv[4], NULL, 10), atof(argv[5]), argc > 6 && strcmp(argv[6], "stop") == 0, &res);
        if (err) {
            fprintf(stderr, "litmus_run: %s\n", strerror(err));
            return 1;
        }
        printf("%llu %llu %d %llu\n", (unsigned long long)res.done, (unsigned long long)res.forbidden, res.aborted,
               (unsigned long long)(res.yielded[0] + res.yielded[1]));
        return 0;
    }
    if (argc >= 6 && strcmp(argv[1], "hunt") == 0) {
        struct hunt_result h;
        int err = futex_hunt(atoi(argv[2]), strtoull(argv[3], NULL, 10), atof(argv[4]), atof(argv[5]), &h);
        if (err) {
            fprintf(stderr, "futex_hunt: %s\n", strerror(err));
            return 1;
        }
        printf("%llu %llu %llu %llu %llu %d\n", (unsigned long long)h.done, (unsigned long long)h.sleeps,
               (unsigned long long)h.wakes, (unsigned long long)h.lost, (unsigned long long)h.late, h.aborted);
        return 0;
    }
    if (argc >= 2 && strcmp(argv[1], "info") == 0) {
        char buf[256];
        printf("compiler: %s\narch: %s\ndropped: %s\n", compiler_name(), arch_name(), DROPPED);
        describe_code((const void *)probe_fence, buf, sizeof buf);
        printf("fence: %s\n", buf);
        describe_code((const void *)probe_f6n, buf, sizeof buf);
        printf("fence_load_u32: %s\n", buf);
        describe_code((const void *)probe_f6w, buf, sizeof buf);
        printf("fetch_add_u32: %s\n", buf);
        return 0;
    }
    fprintf(stderr, "usage: %s run SHAPE POINT|- ITERATIONS BUDGET_S [stop] | hunt 0|1 ITERATIONS BUDGET_S TIMEOUT_S | info\n", argv[0]);
    return 2;
}

#else /* the Python module */

static PyObject *
py_run(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"shape", "control", "iterations", "budget_s", "stop_at_first", NULL};
    const char *shape, *control = NULL;
    unsigned long long iterations;
    double budget;
    int stop = 0, err;
    struct result res;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "szKd|p", names, &shape, &control, &iterations, &budget, &stop))
        return NULL;
    int s = shape_index(shape);
    if (s < 0)
        return PyErr_Format(PyExc_ValueError, "unknown litmus shape %R", PyTuple_GET_ITEM(args, 0));
    int p = point_index(s, control);
    if (p < 0)
        return PyErr_Format(PyExc_ValueError, "shape %s has no fence point %s (it has %s and %s)", shape, control,
                            POINT_NAMES[SHAPES[s].points[0]], POINT_NAMES[SHAPES[s].points[1]]);
    if (!(budget > 0.0))
        return PyErr_Format(PyExc_ValueError, "budget_s must be > 0, got %S", PyTuple_GET_ITEM(args, 3));
    Py_BEGIN_ALLOW_THREADS
    err = litmus_run(s, p, iterations, budget, stop, &res);
    Py_END_ALLOW_THREADS
    if (err) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return Py_BuildValue("{s:K,s:K,s:K,s:O}", "iterations", (unsigned long long)res.done, "forbidden",
                         (unsigned long long)res.forbidden, "yielded",
                         (unsigned long long)(res.yielded[0] + res.yielded[1] < res.done ? res.yielded[0] + res.yielded[1] : res.done),
                         "aborted", res.aborted ? Py_True : Py_False);
}

static PyObject *
py_futex_hunt(PyObject *self, PyObject *args, PyObject *kw)
{
    static char *names[] = {"control", "iterations", "budget_s", "sleep_timeout_s", NULL};
    int ctl, err;
    unsigned long long iterations;
    double budget, sleep_timeout;
    struct hunt_result h;
    if (!PyArg_ParseTupleAndKeywords(args, kw, "pKdd", names, &ctl, &iterations, &budget, &sleep_timeout))
        return NULL;
    if (!(budget > 0.0) || !(sleep_timeout > 0.0))
        return PyErr_Format(PyExc_ValueError, "budget_s and sleep_timeout_s must be > 0");
    Py_BEGIN_ALLOW_THREADS
    err = futex_hunt(ctl, iterations, budget, sleep_timeout, &h);
    Py_END_ALLOW_THREADS
    if (err) {
        errno = err;
        return PyErr_SetFromErrno(PyExc_OSError);
    }
    return Py_BuildValue("{s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:K,s:O,s:i}", "iterations", (unsigned long long)h.done,
                         "yielded", (unsigned long long)h.yielded,
                         "sleeps", (unsigned long long)h.sleeps, "rechecks", (unsigned long long)h.rechecks, "wakes",
                         (unsigned long long)h.wakes, "woken", (unsigned long long)h.woken, "timeouts_flag_set",
                         (unsigned long long)h.timeouts_flag_set, "lost", (unsigned long long)h.lost, "late",
                         (unsigned long long)h.late, "errors", (unsigned long long)h.errors, "aborted",
                         h.aborted ? Py_True : Py_False, "child_status", h.child_status);
}

static PyObject *
py_shapes(PyObject *self, PyObject *unused)
{
    PyObject *out = PyList_New(0);
    for (int s = 0; out != NULL && s < N_SHAPES; s++) {
        PyObject *d = Py_BuildValue("{s:s,s:(ss),s:s}", "shape", SHAPES[s].name, "points",
                                    POINT_NAMES[SHAPES[s].points[0]], POINT_NAMES[SHAPES[s].points[1]], "forbidden",
                                    SHAPES[s].forbidden);
        if (d == NULL || PyList_Append(out, d) < 0) {
            Py_XDECREF(d);
            Py_CLEAR(out);
            break;
        }
        Py_DECREF(d);
    }
    return out;
}

static PyObject *
py_build_info(PyObject *self, PyObject *unused)
{
    char fence[256], f6n[256], f6w[256];
    describe_code((const void *)probe_fence, fence, sizeof fence);
    describe_code((const void *)probe_f6n, f6n, sizeof f6n);
    describe_code((const void *)probe_f6w, f6w, sizeof f6w);
    return Py_BuildValue("{s:s,s:s,s:s,s:s,s:s,s:s}", "compiler", compiler_name(), "arch", arch_name(), "fence", fence,
                         "fence_load_u32", f6n, "fetch_add_u32", f6w, "dropped", DROPPED);
}

static PyMethodDef methods[] = {
    {"run", (PyCFunction)(void (*)(void))py_run, METH_VARARGS | METH_KEYWORDS,
     "run(shape, control, iterations, budget_s, stop_at_first=False) -> {iterations, forbidden, yielded, aborted}.\n"
     "yielded: iterations in which a side had to give up its CPU at the barrier (the sides did not run together;\n"
     "near `iterations` when they took turns on one CPU).\n"
     "control None: shipped fences; a fence point name (e.g. 'F6N'): that fence replaced by a compiler barrier."},
    {"futex_hunt", (PyCFunction)(void (*)(void))py_futex_hunt, METH_VARARGS | METH_KEYWORDS,
     "futex_hunt(control, iterations, budget_s, sleep_timeout_s) -> counts of the parking protocol between two processes."},
    {"shapes", py_shapes, METH_NOARGS, "The litmus shapes: name, its two fence points, the forbidden outcome."},
    {"build_info", py_build_info, METH_NOARGS, "Compiler, architecture, the instructions of the fences, dropped switches."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "_litmus", NULL, -1, methods};

PyMODINIT_FUNC
PyInit__litmus(void)
{
    return PyModule_Create(&module);
}
#endif
