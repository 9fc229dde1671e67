/* rc_poll.c: the descriptor wait (spec/Ring.tla's Poll* actions and NotifySignal), part of the
 * protocol core: included at the end of rc_core.c (it uses the sides' looks and idle checks; rc_wait.c's
 * rc_notify calls its NotifySignal).
 *
 * A side that waits in an event loop cannot park: it must return to the loop, and the loop
 * sleeps on a file descriptor. So the waiting side arms a poll flag in the mapping instead of
 * announcing itself on the eventcount, and the other side's notify, which already loads the
 * eventcount's waiters after F6N, loads the count of armed pollers too and signals each armed
 * poller's descriptor (io->signal: the binding makes it readable) after clearing its flag:
 *
 *   poller:   PollArm pollers += 1, flag := 1 (the increment undone if it was 1), F6W; PollRecheck (the side's look);
 *             not ready: back to the event loop, which sleeps on the descriptor
 *   notifier: (the publishing / acknowledging store) NotifyLoadWaiters F6N, n := waiters,
 *             p := pollers; [NotifyWake if n > 0]; NotifySignal if p > 0: for each armed
 *             poller, flag := 0, pollers -= 1, signal(poller)
 *
 * No lost wake-up, by the park's argument: F6W pairs with F6N, so either the poller's re-check
 * sees the store that made it ready, or the notifier's loads after F6N (the count, then the
 * flags) see both of the arm's RMWs, which come before F6W (models poll_relaxed_count_first and
 * its twin without F6W; GenMC's poll.c). The flag is one-shot: the notifier that
 * clears it signals once, and the poller arms again when it next finds nothing ready, so a writer
 * pays a system call per message only while some reader waits on a descriptor (the futex wake's
 * rule), and nothing when no side polls (p == 0: one more load after F6N). The count is never
 * below the number of flags set: a poller counts itself before it sets its flag, and a notifier
 * (or PollDisarm) decrements it only for a flag its own exchange cleared. It may read one too
 * many for a moment (an arm between its increment and its exchange): "look at the flags", which
 * find the truth. */

static uint32_t *
poll_flag(const rc_layout *L, uint8_t *base, int who)
{
    return word_at(base, who == RC_WRITER ? L->writer_poll : L->polls[who]);
}

/* the count of armed pollers on the side `who` belongs to */
static uint32_t *
pollers_of(const rc_layout *L, uint8_t *base, int who)
{
    return word_at(base, who == RC_WRITER ? L->writer_pollers : L->reader_pollers);
}

/* Spec: PollArm. pollers += 1, then flag := 1 (the increment undone if the flag was set already),
 * then F6W: PollRecheck's loads come after it. The count first: it is never below the number of
 * flags set, since a notify decrements it only for a flag it cleared, which was counted before it
 * was set. (The flag first, then the count, lost a wake-up with two pollers: a notify clearing
 * the flag between the two decremented the count for an increment not yet made, and so ate
 * another armed poller's; spec model poll_flag_first_nr2, GenMC's two-poller poll.c.) */
RC_FENCED static int
poll_arm(const rc_side *s, uint8_t *base)
{
    if (trace(s, RC_PollArm, RC_NO_READER) != RC_OK)
        return RC_ERR_RAISED;
    uint32_t *pollers = pollers_of(s->layout, base, s->side);
    rc_rmw_add_u32(pollers, 1);
    if (rc_exchange_u32(poll_flag(s->layout, base, s->side), 1) == 1)
        rc_rmw_add_u32(pollers, (uint32_t)-1); /* armed already: counted once */
    rc_fence_f6w(); /* F6W pairs with F6N in rc_notify_load_waiters, as the park's announce does */
    return RC_OK;
}

/* Spec: PollDisarm. flag := 0 (pollers -= 1 if it was 1) */
static int
poll_disarm(const rc_side *s, uint8_t *base)
{
    if (trace(s, RC_PollDisarm, RC_NO_READER) != RC_OK)
        return RC_ERR_RAISED;
    if (rc_exchange_u32(poll_flag(s->layout, base, s->side), 0) == 1)
        rc_rmw_add_u32(pollers_of(s->layout, base, s->side), (uint32_t)-1);
    return RC_OK;
}

int
rc_poll_disarm(rc_side *s)
{
    uint8_t *base = pin(s);
    if (base == NULL)
        return RC_ERR_CLOSED;
    int rc = poll_disarm(s, base);
    unpin(s);
    return rc;
}

/* Spec: NotifySignal. Each armed poller of the other side: flag := 0, pollers -= 1, its
 * descriptor signalled. Called by rc_notify after NotifyLoadWaiters found pollers > 0. */
static int
notify_signal(const rc_side *s, uint8_t *base)
{
    if (trace(s, RC_NotifySignal, RC_NO_READER) != RC_OK)
        return RC_ERR_RAISED;
    const rc_layout *L = s->layout;
    int first = s->side == RC_WRITER ? 0 : RC_WRITER, last = s->side == RC_WRITER ? (int)L->n_reader - 1 : RC_WRITER;
    int rc = RC_OK;
    for (int who = first; who <= last; who++) {
        uint32_t *flag = poll_flag(L, base, who);
        if (rc_load_u32(flag) == 0 || rc_exchange_u32(flag, 0) == 0)
            continue;
        rc_rmw_add_u32(pollers_of(L, base, who), (uint32_t)-1);
        int sr = s->io->signal(s->io->ctx, who); /* every armed poller is signalled, even after an error */
        s->counters->signals++;
        if (rc == RC_OK)
            rc = sr;
    }
    return rc;
}

/* One round of the descriptor wait (rc_core.h) with the side's look and idle checks */
static int
poll_round(rc_side *s, rc_ready_fn look, rc_idle_fn idle, int arm, int check, int *ready)
{
    int rc = look(s, ready);
    if (rc != RC_OK || *ready)
        return rc;
    uint8_t *base = pin(s);
    if (base == NULL)
        return RC_ERR_CLOSED;
    if (arm && (rc = poll_arm(s, base)) == RC_OK) {
        /* Spec: PollRecheck (its loads are the look's own steps) */
        rc = trace(s, RC_PollRecheck, RC_NO_READER);
        if (rc == RC_OK)
            rc = look(s, ready);
        if (rc == RC_OK && *ready) /* found after all: the notify would signal for nothing */
            rc = poll_disarm(s, base);
    }
    unpin(s);
    if (rc == RC_OK && !*ready && check && (rc = idle(s, 0.0)) == RC_OK)
        rc = look(s, ready); /* an eviction may have freed the chunk */
    return rc;
}

/* -------------------------------------------------------------------- the entry points -- */

/* Every live reader done with the last published chunk (rc_writer_unread's scan while draining;
 * readers read in order, so done with every message so far; nothing published: done) */
static int
writer_consumed(rc_side *s, int *done)
{
    rc_writer *w = (rc_writer *)s;
    int n = rc_writer_unread(w, w->liveness);
    *done = n == 0;
    return n < 0 ? n : RC_OK;
}

/* The writer's round of the descriptor wait, between messages (nothing claimed): for a free chunk
 * (rc_writer_poll) or for every live reader done (rc_writer_poll_consumed: `draining`, so that the
 * idle checks look at the last published chunk) */
static int
writer_round(rc_writer *w, rc_ready_fn look, int draining, int arm, int check, int *ready)
{
    if (w->phase != RC_W_IDLE)
        return fail(&w->s, RC_ERR_STATE);
    if (rc_cancel_requested(w->s.cancel))
        return fail(&w->s, RC_ERR_CANCELLED);
    w->draining = draining;
    int rc = poll_round(&w->s, look, writer_idle, arm, check, ready);
    w->draining = 0;
    return rc;
}

int
rc_writer_poll(rc_writer *w, int arm, int check, int *ready)
{
    return writer_round(w, writer_ready, 0, arm, check, ready);
}

int
rc_writer_poll_consumed(rc_writer *w, int arm, int check, int *ready)
{
    return writer_round(w, writer_consumed, 1, arm, check, ready);
}

/* The consumed wait: what an error left owed first (its message counts), then until consumed */
int
rc_writer_drain(rc_writer *w, double timeout)
{
    if (w->phase != RC_W_IDLE)
        return fail(&w->s, RC_ERR_STATE);
    int rc = w->owed_chunk >= 0 || w->wake_owed ? rc_writer_finish(w) : RC_OK, done = 0;
    if (rc != RC_OK)
        return rc;
    w->draining = 1;
    if ((rc = writer_consumed(&w->s, &done)) == RC_OK && !done)
        rc = side_wait(&w->s, timeout, writer_consumed, writer_idle);
    w->draining = 0;
    return rc;
}

/* A reader's round: gone, evicted or owed a payload is ready at once (receive raises or takes
 * the payload, which the writer sent before the marker's publish); else the look */
int
rc_reader_poll(rc_reader *rd, int arm, int check, int *ready)
{
    *ready = 1;
    if (rd->phase == RC_R_GONE)
        return gone(rd, 0.0);
    if (rd->phase != RC_R_IDLE)
        return fail(&rd->s, RC_ERR_STATE);
    if (rc_cancel_requested(rd->s.cancel))
        return fail(&rd->s, RC_ERR_CANCELLED);
    if (rd->owed_payload)
        return RC_OK;
    return poll_round(&rd->s, reader_ready, reader_idle, arm, check, ready);
}
