/* rc_core.c: the protocol core (rc_core.h has the picture): each side's per-message state
 * machine, every transition of a side in this file, with every decision of a side (each eviction:
 * writer_idle, reader_idle); the steps are rc_steps.c's, the eventcount and the wait rc_wait.c's,
 * the descriptor wait rc_poll.c's,
 * single steps for tests rc_single.c's (included: one translation unit, plain C, no CPython header).
 *
 * The CPython extension (src/ringcast/binding/_protocol.c) includes this file; a model checker's harness
 * compiles it alone (issue 39: GenMC), with its own rc_iface. */
#include <string.h>

#include "rc_core.h"
#include "rc_fences.h"

#include "rc_steps.c"
#include "rc_wait.c"
#ifdef RINGCAST_TEST_PLANTED
#include "rc_planted.c"
#endif

static int
fail(const rc_side *s, rc_status code)
{
    s->io->fail(s->io->ctx, code, 0.0);
    return code;
}

static int writer_idle(rc_side *s, double waited);
static int reader_idle(rc_side *s, double waited);

static void
side_init(rc_side *s, int side, const rc_layout *layout, const rc_iface *io, const rc_policy *policy,
          rc_counters *counters, rc_cancel *cancel)
{
    memset(s, 0, sizeof *s);
    s->layout = layout;
    s->io = io;
    s->policy = policy;
    s->counters = counters;
    s->cancel = cancel;
    s->side = side;
}

void
rc_writer_init(rc_writer *w, const rc_layout *layout, const rc_iface *io, const rc_policy *policy,
               rc_counters *counters, rc_cancel *cancel, uint8_t *live, uint8_t *liveness)
{
    memset(w, 0, sizeof *w);
    side_init(&w->s, RC_WRITER, layout, io, policy, counters, cancel);
    w->live = live;
    w->liveness = liveness;
    for (uint32_t r = 0; r < layout->n_reader; r++)
        live[r] = 1;
    w->owed_chunk = w->claimed = -1;
    w->phase = RC_W_IDLE;
}

void
rc_reader_init(rc_reader *rd, uint32_t reader, const rc_layout *layout, const rc_iface *io,
               const rc_policy *policy, rc_counters *counters, rc_cancel *cancel)
{
    memset(rd, 0, sizeof *rd);
    side_init(&rd->s, (int)reader, layout, io, policy, counters, cancel);
    rd->r = reader;
    rd->phase = RC_R_IDLE;
}

/* ------------------------------------------------------------------------------ the writer -- */

/* The writer's look: WriterClaim */
int
rc_writer_look(rc_writer *w, int *free_)
{
#ifdef RINGCAST_TEST_PLANTED
    if (w->s.planted == RC_PLANT_SCAN_AHEAD)
        return planted_scan_ahead(w, free_);
#endif
    return writer_claim(w, free_);
}

static int
writer_ready(rc_side *s, int *free_)
{
    return rc_writer_look((rc_writer *)s, free_);
}

/* WriterClaim until the chunk at the cursor is free: one look, then the wait. */
int
rc_writer_claim(rc_writer *w, double timeout)
{
    int free_ = 0, rc = rc_writer_look(w, &free_);
    if (rc != RC_OK || free_)
        return rc;
    return side_wait(&w->s, timeout, writer_ready, writer_idle);
}

/* The one scan of "the live readers that have not read the chunk at the writer's cursor" (while
 * a consumed wait runs: the last published chunk; peeks, not steps): mark[r] RC_UNREAD for each, else RC_ALIVE; how many, or an error */
int
rc_writer_unread(rc_writer *w, uint8_t *mark)
{
    rc_side *s = &w->s;
    uint8_t *base = pin(s);
    if (base == NULL)
        return RC_ERR_CLOSED;
    size_t chunk = w->draining ? (s->index + s->layout->max_chunks - 1) % s->layout->max_chunks : s->index;
    const uint8_t *m = base + s->layout->metas[chunk];
    int written = rc_load_u8(m) == 1, n = 0;
    for (uint32_t r = 0; r < s->layout->n_reader; r++) {
        int unread = written && w->live[r] && rc_load_u8(m + 1 + r) == 0;
        mark[r] = unread ? RC_UNREAD : RC_ALIVE;
        n += unread;
    }
    unpin(s);
    return n;
}

/* The writer, parked, before each park (the wait's idle): the live readers it waits for that are
 * dead are evicted (evict_dead) or the wait fails; one whose liveness cannot be told is neither;
 * then the long-wait log. Every writer-side eviction is decided here. */
static int
writer_idle(rc_side *s, double waited)
{
    rc_writer *w = (rc_writer *)s;
    const rc_iface *io = s->io;
    uint32_t n_reader = s->layout->n_reader, dead = 0;
    int rc = rc_writer_unread(w, w->liveness);
    if (rc < 0)
        return rc;
    for (uint32_t r = 0; r < n_reader; r++)
        if (w->liveness[r] == RC_UNREAD) {
            int v = io->probe(io->ctx, (int)r, waited);
            if (v < 0)
                return v;
            w->liveness[r] = (uint8_t)v;
            dead += v == RC_DEAD;
        }
    if (dead > 0) {
        if (!w->evict_dead) {
            io->fail(io->ctx, RC_ERR_DEAD_READERS, waited);
            return RC_ERR_DEAD_READERS;
        }
        for (uint32_t r = 0; r < n_reader; r++)
            if (w->liveness[r] == RC_DEAD) {
                if ((rc = writer_evict(w, r)) != RC_OK)
                    return rc;
                s->counters->evictions++;
            }
        if ((rc = io->report(io->ctx, RC_REPORT_EVICTED, waited)) != RC_OK)
            return rc;
    }
    return io->report(io->ctx, RC_REPORT_LONG_WAIT, waited);
}

/* F7; WriterClearReadFlag for each live reader; WriterPublish (the order spec/Ring.tla proves).
 * FlagOut: once a flag is cleared a reader may take the chunk, so from before the first clear
 * the message is owed (finished, never dropped; model abort_code_n1). */
RC_FENCED static int
clear_and_publish(rc_writer *w)
{
    rc_side *s = &w->s;
    int rc;
    w->owed_chunk = (long)s->index;
#ifdef RINGCAST_TEST_PLANTED
    if (s->planted == RC_PLANT_REVERSED)
        rc = planted_reversed(w);
    else
#endif
    {
        RC_F7(); /* F7 pairs with F4 in rc_reader_look: the payload is visible before any reader can see its flag cleared */
        for (uint32_t r = 0; r < s->layout->n_reader; r++)
            if (w->live[r] && (rc = writer_clear_read_flag(w, r)) != RC_OK)
                return rc;
        rc = writer_publish(w);
    }
    if (rc != RC_OK)
        return rc;
    w->owed_chunk = w->claimed = -1;
    w->phase = RC_W_IDLE;
    w->wake_owed = 1; /* until the notify below is through */
    return RC_OK;
}

/* The published message's notify */
static int
notify_published(rc_writer *w)
{
    int rc = rc_notify(&w->s);
    if (rc == RC_OK)
        w->wake_owed = 0;
    return rc;
}

int
rc_writer_finish(rc_writer *w)
{
    int rc;
    if (w->owed_chunk >= 0) { /* its flags are being cleared, or its payload is out: publish it (the cursor is still at it) */
        if ((rc = clear_and_publish(w)) != RC_OK)
            return rc;
    }
    return w->wake_owed ? notify_published(w) : RC_OK;
}

/* An error `rc` ended the message in flight: drop it while nothing of it is out (no flag cleared,
 * no overflow payload sent: io->report DROPPED), else it is owed; then finish what is owed (its
 * errors the binding chains to rc's). */
static int
aborted(rc_writer *w, int rc, int published)
{
    const rc_iface *io = w->s.io;
    long c = w->claimed;
    w->claimed = -1;
    w->phase = RC_W_IDLE;
    if (!published && !(c >= 0 && w->owed_chunk == c))
        (void)io->report(io->ctx, RC_REPORT_DROPPED, 0.0);
    if (w->owed_chunk >= 0 || w->wake_owed) {
        int fin = rc_writer_finish(w);
        if (rc == RC_OK)
            rc = fin;
    }
    return rc;
}

/* Finish what is owed, claim the chunk at the cursor, WriterClearWritten. */
static int
begin(rc_writer *w, double timeout)
{
    int rc;
    if (w->phase != RC_W_IDLE)
        return fail(&w->s, RC_ERR_STATE);
    if ((w->owed_chunk >= 0 || w->wake_owed) && (rc = rc_writer_finish(w)) != RC_OK)
        return rc;
    if ((rc = rc_writer_claim(w, timeout)) != RC_OK || (rc = writer_clear_written(w)) != RC_OK)
        return rc;
    w->claimed = (long)w->s.index;
    w->phase = RC_W_CLAIMED;
    return RC_OK;
}

/* Spec: WriterSendOverflow. The payload is out once the send returns: from there the marker must
 * follow (owed). */
static int
send_overflow(rc_writer *w)
{
    const rc_iface *io = w->s.io;
    if (trace(&w->s, RC_WriterSendOverflow, RC_NO_READER) != RC_OK)
        return RC_ERR_RAISED;
    int rc = io->send_overflow(io->ctx);
    if (rc == RC_OK)
        w->owed_chunk = w->claimed;
    return rc;
}

int
rc_writer_publish(rc_writer *w, const rc_parts *parts, int overflow, int split, double timeout)
{
    int rc = begin(w, timeout), published = 0;
    if (rc == RC_OK && split && parts->n > 0) {
        rc_parts head = {1, parts->bufs, parts->lens};
        rc = writer_write_payload(w, &head, NULL);
    }
    if (rc == RC_OK)
        rc = writer_write_payload(w, parts, NULL);
    if (rc == RC_OK && overflow)
        rc = send_overflow(w);
    if (rc == RC_OK)
        published = (rc = clear_and_publish(w)) == RC_OK;
    if (rc == RC_OK)
        rc = notify_published(w);
    return rc == RC_OK ? RC_OK : aborted(w, rc, published);
}

int
rc_writer_acquire(rc_writer *w, double timeout, uint8_t **data)
{
    static const rc_parts none = {0, NULL, NULL};
    int rc = begin(w, timeout);
    if (rc == RC_OK) /* the step point of the caller's stores into the chunk */
        rc = writer_write_payload(w, &none, NULL);
    if (rc == RC_OK) {
        uint8_t *base = pin(&w->s);
        if (base == NULL)
            rc = RC_ERR_CLOSED;
        else {
            *data = base + w->s.layout->datas[w->s.index];
            unpin(&w->s);
            w->phase = RC_W_ACQUIRED;
        }
    }
    return rc == RC_OK ? RC_OK : aborted(w, rc, 0);
}

int
rc_writer_commit(rc_writer *w)
{
    if (w->phase != RC_W_ACQUIRED)
        return fail(&w->s, RC_ERR_STATE);
    int rc = clear_and_publish(w), published = rc == RC_OK;
    if (rc == RC_OK)
        rc = notify_published(w);
    return rc == RC_OK ? RC_OK : aborted(w, rc, published);
}

int
rc_writer_abort(rc_writer *w)
{
    if (w->phase != RC_W_ACQUIRED)
        return fail(&w->s, RC_ERR_STATE);
    return aborted(w, RC_OK, 0);
}

/* ------------------------------------------------------------------------------- a reader -- */

/* ReaderLoadWritten, ReaderLoadReadFlag (short-circuit: after written = 0 no flag load), F4 */
RC_FENCED int
rc_reader_look(rc_reader *rd, int *ready)
{
    int v = 0, rc;
    *ready = 0;
#ifdef RINGCAST_TEST_PLANTED
    if (rd->s.planted == RC_PLANT_SKIP || rd->s.planted == RC_PLANT_LAPPED)
        return planted_look(rd, ready);
#endif
    if ((rc = reader_load_written(rd, &v)) != RC_OK || v != 1)
        return rc;
    if ((rc = reader_load_read_flag(rd, &v)) != RC_OK || v != 0)
        return rc;
    RC_F4(); /* F4 pairs with F3 in writer_publish and F7 in clear_and_publish: the copy reads the payload published with the flags just loaded */
    *ready = 1;
    return RC_OK;
}

static int
reader_ready(rc_side *s, int *ready)
{
    return rc_reader_look((rc_reader *)s, ready);
}

/* This reader is gone (evicted): it receives nothing more. `copied`: a copy was dropped (1), or
 * it was found evicted while it waited (0), io->fail's value. */
static int
gone(rc_reader *rd, double copied)
{
    rd->phase = RC_R_GONE;
    rd->s.io->fail(rd->s.io->ctx, RC_ERR_EVICTED, copied);
    return RC_ERR_EVICTED;
}

/* A reader, parked, before each park (the wait's idle): evicted (the one predicate, evicted_at):
 * gone; else the writer's liveness (the binding fails a dead writer), then the long-wait log. */
static int
reader_idle(rc_side *s, double waited)
{
    rc_reader *rd = (rc_reader *)s;
    uint8_t *base = pin(s);
    if (base == NULL)
        return RC_ERR_CLOSED;
    int evicted = evicted_at(base, s->layout, rd->r);
    unpin(s);
    if (evicted)
        return gone(rd, 0.0);
    int rc = s->io->probe(s->io->ctx, RC_WRITER, waited);
    if (rc < 0)
        return rc;
    return s->io->report(s->io->ctx, RC_REPORT_LONG_WAIT, waited);
}

/* Look until ready: one look, then the wait */
int
rc_reader_wait(rc_reader *rd, double timeout)
{
    int ready = 0, rc = rc_reader_look(rd, &ready);
    if (rc != RC_OK || ready)
        return rc;
    return side_wait(&rd->s, timeout, reader_ready, reader_idle);
}

/* After the copy (rc_copy: its result): F8 and ReaderCheckEvicted (evicted: the copy is dropped,
 * the reader is gone and does not ack), then ReaderAck, also when the copy failed, and the
 * writer's wake-up. A marker's payload is owed from the ack on. */
static int
check_and_ack(rc_reader *rd, int rc_copy, int marker)
{
    int evicted = 0, rc = reader_check_evicted(rd, &evicted);
    if (rc == RC_OK && evicted)
        return gone(rd, 1.0);
    int ra = reader_ack(rd);
    if (ra == RC_OK) {
        if (marker && rc_copy == RC_OK && rc == RC_OK)
            rd->owed_payload = 1;
        ra = rc_notify(&rd->s);
    }
    return rc_copy != RC_OK ? rc_copy : rc != RC_OK ? rc : ra;
}

/* Spec: ReaderRecvOverflow. owed_payload is cleared as the payload arrives (no step between). */
static int
recv_overflow(rc_reader *rd)
{
    const rc_iface *io = rd->s.io;
    if (trace(&rd->s, RC_ReaderRecvOverflow, RC_NO_READER) != RC_OK)
        return RC_ERR_RAISED;
    int rc = io->recv_overflow(io->ctx);
    if (rc == RC_OK)
        rd->owed_payload = 0;
    return rc;
}

int
rc_reader_receive(rc_reader *rd, double timeout, int *marker)
{
    *marker = 0;
    if (rd->phase == RC_R_GONE)
        return gone(rd, 0.0);
    if (rd->phase != RC_R_IDLE)
        return fail(&rd->s, RC_ERR_STATE);
    if (!rd->owed_payload) {
#ifdef RINGCAST_TEST_PLANTED
        if (rd->s.planted == RC_PLANT_EARLY_ACK)
            return planted_early_ack(rd, timeout);
#endif
        int rc = rc_reader_wait(rd, timeout), kind = RC_COPIED;
        if (rc != RC_OK)
            return rc;
        const uint8_t *data = NULL;
        if ((rc = reader_copy(rd, &data)) == RC_OK) {
            uint8_t *base = pin(&rd->s);
            if (base == NULL)
                rc = RC_ERR_CLOSED;
            else {
                kind = rd->s.io->copy_out(rd->s.io->ctx, base + rd->s.layout->datas[rd->s.index], rd->s.layout->max_chunk_bytes);
                unpin(&rd->s);
                if (kind < 0)
                    rc = kind;
            }
        }
        if ((rc = check_and_ack(rd, rc, kind == RC_MARKER)) != RC_OK || kind != RC_MARKER)
            return rc;
    }
    /* a marker: its payload, now or owed from a receive that failed after the ack */
    int rc = recv_overflow(rd);
    if (rc == RC_OK)
        *marker = 1;
    return rc;
}

int
rc_reader_acquire(rc_reader *rd, double timeout, const uint8_t **data, size_t *len)
{
    if (rd->phase == RC_R_GONE)
        return gone(rd, 0.0);
    if (rd->phase != RC_R_IDLE)
        return fail(&rd->s, RC_ERR_STATE);
    int rc = rc_reader_wait(rd, timeout);
    if (rc != RC_OK)
        return rc;
    if ((rc = reader_copy(rd, data)) != RC_OK)
        return check_and_ack(rd, rc, 0);
    *len = rd->s.layout->max_chunk_bytes;
    rd->phase = RC_R_ACQUIRED;
    return RC_OK;
}

int
rc_reader_release(rc_reader *rd)
{
    if (rd->phase != RC_R_ACQUIRED)
        return fail(&rd->s, RC_ERR_STATE);
    rd->phase = RC_R_IDLE;
    return check_and_ack(rd, RC_OK, 0);
}

#include "rc_poll.c" /* the descriptor wait: its steps and entry points (after the sides' looks and idles) */

#ifdef RC_SINGLE_STEPS /* the lab's test extension only: the runtime runs whole sequences */
#include "rc_single.c"
#endif
