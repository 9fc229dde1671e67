/* rc_wait.c: the eventcount's steps (spec/Ring.tla's Park* and Notify* actions) and a side's wait
 * (spin, then park until the side's look says ready, the side's idle checks before each park),
 * part of the protocol core: included by rc_core.c after rc_steps.c (trace, pin).
 *
 * The eventcount (ringcast.waiting has the protocol and its proof sketch):
 *   waiter:   ParkSnapshot s := seq; ParkAnnounce waiters += 1 (F6W); ParkRecheck (a look);
 *             ParkSleep futex_wait(seq, s); ParkRetire waiters -= 1
 *   notifier: (the publishing store) NotifyLoadWaiters F6N, n := waiters; NotifyWake if n > 0:
 *             seq += 1, futex_wake(seq)
 * F6W pairs with F6N: either the notifier's load sees the announce, or the waiter's re-check sees
 * the publication. */

static inline uint32_t *
word_at(uint8_t *base, size_t off)
{
    return (uint32_t *)(void *)(base + off);
}

/* Spec: ParkSnapshot. s := seq */
int
rc_park_snapshot(const rc_side *s, uint32_t *seq, uint32_t *snap)
{
    if (trace(s, RC_ParkSnapshot, RC_NO_READER) != RC_OK)
        return RC_ERR_RAISED;
    *snap = rc_load_u32(seq);
    return RC_OK;
}

/* Spec: ParkAnnounce. waiters += 1: the seq_cst RMW, then the full fence F6W */
RC_FENCED int
rc_park_announce(const rc_side *s, uint32_t *waiters)
{
    if (trace(s, RC_ParkAnnounce, RC_NO_READER) != RC_OK)
        return RC_ERR_RAISED;
    rc_fetch_add_u32(waiters, 1); /* F6W pairs with F6N in rc_notify_load_waiters: the re-check's loads come after the announce */
    return RC_OK;
}

/* Spec: ParkSleep. futex_wait(seq, snapshot, timeout): *result RC_WOKEN .. RC_INTERRUPTED */
int
rc_park_sleep(const rc_side *s, uint32_t *seq, uint32_t snap, double timeout, int *result)
{
    if (trace(s, RC_ParkSleep, RC_NO_READER) != RC_OK)
        return RC_ERR_RAISED;
    if (timeout > 1e9) /* ~31 years: the sleep is capped by recheck_interval, which may be set that high */
        timeout = 1e9;
    s->counters->parks++;
    int rc = s->io->futex_wait(s->io->ctx, seq, snap, timeout < 0 ? 0.0 : timeout);
    if (rc < 0)
        return rc;
    *result = rc;
    return RC_OK;
}

/* Spec: ParkRetire. waiters -= 1 */
int
rc_park_retire(const rc_side *s, uint32_t *waiters)
{
    if (trace(s, RC_ParkRetire, RC_NO_READER) != RC_OK)
        return RC_ERR_RAISED;
    rc_fetch_add_u32(waiters, (uint32_t)-1);
    return RC_OK;
}

/* Spec: NotifyLoadWaiters. F6N, a full fence, then n := waiters */
RC_FENCED int
rc_notify_load_waiters(const rc_side *s, uint32_t *waiters, uint32_t *n)
{
    if (trace(s, RC_NotifyLoadWaiters, RC_NO_READER) != RC_OK)
        return RC_ERR_RAISED;
    *n = rc_fence_load_u32(waiters); /* F6N pairs with F6W in rc_park_announce: the publishing store is visible before waiters is read */
    return RC_OK;
}

static int
wake(const rc_iface *io, uint32_t *seq)
{
    rc_fetch_add_u32(seq, 1);
    return io->futex_wake(io->ctx, seq);
}

/* Spec: NotifyWake. seq += 1; wake every sleeper on seq. */
int
rc_notify_wake(const rc_side *s, uint32_t *seq)
{
    if (trace(s, RC_NotifyWake, RC_NO_READER) != RC_OK)
        return RC_ERR_RAISED;
    int rc = wake(s->io, seq);
    if (rc == RC_OK)
        s->counters->wakeups++;
    return rc;
}

/* The eventcount a side parks on (1) or notifies (0): the offsets of its seq and waiters words */
static void
eventcount(const rc_side *s, int parks, size_t *seq, size_t *waiters)
{
    const rc_layout *L = s->layout;
    int on_write_seq = (s->side == RC_WRITER) != parks; /* readers park on write_seq, the writer notifies it */
    *seq = on_write_seq ? L->write_seq : L->read_seq;
    *waiters = on_write_seq ? L->reader_waiters : L->writer_waiters;
}

static int notify_signal(const rc_side *s, uint8_t *base); /* rc_poll.c */

/* NotifyLoadWaiters (F6N, n := waiters; after the same fence the armed pollers' count p, the
 * descriptor wait's), [NotifyWake], [NotifySignal] */
int
rc_notify(rc_side *s)
{
    size_t so, wo;
    eventcount(s, 0, &so, &wo);
    uint8_t *base = pin(s);
    if (base == NULL)
        return RC_ERR_CLOSED;
    uint32_t n = 0;
    int rc = rc_notify_load_waiters(s, word_at(base, wo), &n);
    uint32_t p = rc_load_u32(word_at(base, s->side == RC_WRITER ? s->layout->reader_pollers : s->layout->writer_pollers));
    if (rc == RC_OK && n > 0)
        rc = rc_notify_wake(s, word_at(base, so));
    if (rc == RC_OK && p != 0)
        rc = notify_signal(s, base);
    unpin(s);
    return rc;
}

void
rc_cancel_set(rc_cancel *c)
{
    rc_store_u32(&c->requested, 1);
}

int
rc_cancel_requested(const rc_cancel *c)
{
    return c != NULL && rc_load_u32((uint32_t *)&c->requested) != 0;
}

/* Not a spec action and not traced: shutdown() may run on any thread. */
int
rc_wake_all(const rc_layout *L, const rc_iface *io)
{
    uint8_t *base = io->pin(io->ctx);
    if (base == NULL)
        return RC_OK; /* closed: nobody sleeps on this mapping in this process any more */
    int rc = wake(io, word_at(base, L->write_seq));
    if (rc == RC_OK)
        rc = wake(io, word_at(base, L->read_seq));
    io->unpin(io->ctx);
    return rc;
}

/* ---------------------------------------------------------------------------- the wait -- */

/* What a wait asks of the side that waits: whether it is ready (its look: the side's own steps)
 * and, before each park, what it does while idle (rc_core.c: the writer's dead-reader checks and
 * evictions, a reader's eviction and writer checks, the long-wait log). The wait holds no policy
 * of its own: it spins, parks and times out. */
typedef int (*rc_ready_fn)(rc_side *s, int *ready);
typedef int (*rc_idle_fn)(rc_side *s, double waited);

/* One park: snapshot, announce, re-check, sleep, retire. Once announced, every way out retires
 * (an error too: a waiters + 1 left behind would make every later notify wake). */
static int
park(rc_side *s, double nap, rc_ready_fn look, int *ready)
{
    size_t so, wo;
    eventcount(s, 1, &so, &wo);
    uint8_t *base = pin(s);
    if (base == NULL)
        return RC_ERR_CLOSED;
    uint32_t *seq = word_at(base, so), *waiters = word_at(base, wo), snap = 0;
    int slept = -1, rc = rc_park_snapshot(s, seq, &snap);
    if (rc == RC_OK && (rc = rc_park_announce(s, waiters)) == RC_OK) {
        /* Spec: ParkRecheck (its loads are the look's own steps) */
        rc = trace(s, RC_ParkRecheck, RC_NO_READER);
        if (rc == RC_OK)
            rc = look(s, ready);
        if (rc == RC_OK && !*ready && !rc_cancel_requested(s->cancel))
            rc = rc_park_sleep(s, seq, snap, nap, &slept);
        int retired = rc_park_retire(s, waiters);
        if (rc == RC_OK)
            rc = retired;
    }
    if (rc == RC_OK && slept >= 0) {
        if ((rc = s->io->check_signals(s->io->ctx)) == RC_OK && (rc = look(s, ready)) == RC_OK && *ready
            && slept == RC_TIMED_OUT && rc_load_u32(seq) == snap) /* a diagnostic load, not a step */
            s->counters->recheck_hits++;                          /* a lost wake-up, recovered by the cap */
    }
    unpin(s);
    return rc;
}

/* The spin budget of one wait. A side whose previous wait ended within policy->spin_max spins up
 * to RC_SPIN_ADAPT times that long this time (at least spin, at most spin_max): messages a little
 * more than spin apart, as three readers taking turns on two cores see them, are caught spinning
 * instead of each paying a park and a kernel wake-up, and a gap that varies by up to that factor
 * does not make it park. After a longer wait (or a timeout, or none yet) it spins for spin: a
 * side idle between messages costs what it did. spin_max <= spin: always spin. */
#define RC_SPIN_ADAPT 4.0

static double
spin_budget(const rc_policy *p, double last_wait)
{
    if (p->spin_max <= p->spin || last_wait > p->spin_max)
        return p->spin;
    double b = RC_SPIN_ADAPT * last_wait;
    return b < p->spin ? p->spin : b > p->spin_max ? p->spin_max : b;
}

/* Look until ready: tight looks, then look-and-yield for the spin budget (the spin phase), then
 * park (the park phase) until ready, the timeout (< 0: none) or a cancel. */
static int
wait_phases(rc_side *s, double start, double timeout, double budget, rc_ready_fn look, rc_idle_fn idle)
{
    const rc_iface *io = s->io;
    const rc_policy *p = s->policy;
    int ready = 0, rc;
    double deadline = timeout < 0 ? 1e300 : start + timeout;
    for (uint32_t k = 0; k < p->tight_looks; k++) {
        if ((rc = look(s, &ready)) != RC_OK || ready)
            return rc;
        rc_spin_hint();
    }
    while (!rc_cancel_requested(s->cancel)) { /* a cancel: the park phase says so */
        if ((rc = look(s, &ready)) != RC_OK || ready)
            return rc;
        double now = io->now(io->ctx);
        if (now >= start + budget || now >= deadline)
            break;
        s->counters->spins++;
        rc_spin_hint();
        io->yield(io->ctx);
        if ((rc = io->check_signals(io->ctx)) != RC_OK)
            return rc;
    }
    for (;;) {
        if (rc_cancel_requested(s->cancel)) {
            io->fail(io->ctx, RC_ERR_CANCELLED, 0.0);
            return RC_ERR_CANCELLED;
        }
        double now = io->now(io->ctx);
        if (now >= deadline) {
            if ((rc = look(s, &ready)) != RC_OK || ready)
                return rc;
            s->counters->timeouts++;
            io->fail(io->ctx, RC_ERR_TIMEOUT, now - start);
            return RC_ERR_TIMEOUT;
        }
        if ((rc = idle(s, now - start)) != RC_OK)
            return rc;
        double nap = deadline - now < p->recheck_interval ? deadline - now : p->recheck_interval;
        if (p->use_futex)
            rc = park(s, nap, look, &ready);
        else {
            s->counters->parks++;
            if ((rc = io->sleep(io->ctx, nap < 1e-3 ? nap : 1e-3)) == RC_OK)
                rc = look(s, &ready);
        }
        if (rc != RC_OK || ready)
            return rc;
    }
}

/* One wait (the writer's claim, a reader's wait for a message) until `look` says ready:
 * wait_phases with this wait's spin budget, `idle` before each park; then, where the budget
 * adapts, note how long it took (the next budget's input; with spin_max <= spin nothing reads it,
 * so the clock is not read again). */
static int
side_wait(rc_side *s, double timeout, rc_ready_fn look, rc_idle_fn idle)
{
    const rc_iface *io = s->io;
    s->counters->waits++;
    double start = io->now(io->ctx);
    int rc = wait_phases(s, start, timeout, spin_budget(s->policy, s->last_wait), look, idle);
    if (s->policy->spin_max > s->policy->spin)
        s->last_wait = rc == RC_OK ? io->now(io->ctx) - start : 1e300;
    return rc;
}
