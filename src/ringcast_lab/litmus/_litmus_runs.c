/* _litmus_runs.c: the two-thread runs of the fence shapes (litmus_run), part of the ringcast_lab._litmus
 * extension: included by _litmus.c (one translation unit: the fence points, shapes and helpers
 * above it in that file are shared). */

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
