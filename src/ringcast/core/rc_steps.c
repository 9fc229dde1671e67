/* rc_steps.c: the ring's steps, one C function per action of spec/Ring.tla (tagged
 * `Spec: WriterClaim` ...), part of the protocol core: included by rc_core.c, which orders them.
 * Each step does, in order: its tracepoint (the step hook; the step has not happened if it
 * fails), io->pin, its accesses with rc_fences.h's primitives, io->unpin.
 *
 * Fence pairs (each fence names the fence it pairs with, as linux/wait.h does):
 *   F1 (writer_claim: after the flag loads, before the payload stores)  <->  F5 (reader_ack)
 *      and F8 (reader_check_evicted: eviction's stores come before a refill's payload)
 *   F3 (writer_publish: before written := 1)  <->  F4 (rc_core.c's rc_reader_look: after the flag loads)
 *   F7 (rc_core.c's clear_and_publish: before the read-flag clears)  <->  F4 (rc_reader_look)
 *   F5 (reader_ack: after the copy, before read_r := 1)  <->  F1 (writer_claim)
 *   F8 (reader_check_evicted: after the copy, before the evicted load)  <->  F1 (writer_claim)
 * Test-only switches (never passed by setup.py): -DRINGCAST_TEST_DROP_F1 / _F3 / _F4 / _F5 /
 * _F7 / _F8 turn that point's fence into a compiler barrier (the litmus tests' spelling);
 * F6N / F6W are rc_fences.h's. */

#ifdef RINGCAST_TEST_DROP_F1
#define RC_F1() rc_compiler_barrier()
#else
#define RC_F1() rc_fence()
#endif
#ifdef RINGCAST_TEST_DROP_F3
#define RC_F3() rc_compiler_barrier()
#else
#define RC_F3() rc_fence()
#endif
#ifdef RINGCAST_TEST_DROP_F4
#define RC_F4() rc_compiler_barrier()
#else
#define RC_F4() rc_fence()
#endif
#ifdef RINGCAST_TEST_DROP_F5
#define RC_F5() rc_compiler_barrier()
#else
#define RC_F5() rc_fence()
#endif
#ifdef RINGCAST_TEST_DROP_F7
#define RC_F7() rc_compiler_barrier()
#else
#define RC_F7() rc_fence()
#endif
#ifdef RINGCAST_TEST_DROP_F8
#define RC_F8() rc_compiler_barrier()
#else
#define RC_F8() rc_fence()
#endif

/* A function with a fence point keeps its own symbol: tests/proofs/test_arm_codegen.py reads its AArch64
 * code (a call more per step, next to a fence's tens of nanoseconds) */
#if defined(__clang__)
#define RC_FENCED __attribute__((noinline))
#else
#define RC_FENCED __attribute__((noinline, noclone))
#endif

const char *const rc_action_names[RC_N_ACTIONS] = {
    "WriterClaim", "WriterClearWritten", "WriterWritePayload", "WriterSendOverflow", "WriterClearReadFlag",
    "WriterPublish", "WriterEvict", "ReaderLoadWritten", "ReaderLoadReadFlag", "ReaderCopy", "ReaderCheckEvicted",
    "ReaderAck", "ReaderRecvOverflow", "ParkSnapshot", "ParkAnnounce", "ParkRecheck", "ParkSleep", "ParkRetire",
    "NotifyLoadWaiters", "NotifyWake", "PollArm", "PollRecheck", "PollDisarm", "NotifySignal",
};

rc_hook_fn rc_step_hook = NULL;

/* The tracepoint: RC_OK, or RC_ERR_RAISED (the hook failed: the step has not happened).
 * -DRINGCAST_NO_TRACEPOINTS compiles it out (tests/stateful/bench_hook.py's comparison build). */
static inline int
trace(const rc_side *s, rc_action action, int reader)
{
#ifdef RINGCAST_NO_TRACEPOINTS
    (void)s, (void)action, (void)reader;
    return RC_OK;
#else
    rc_hook_fn h = rc_step_hook;
    return h == NULL || h(action, s->side, s->index, reader) == 0 ? RC_OK : RC_ERR_RAISED;
#endif
}

/* The mapping for one access: its base, or NULL (closed: reported with io->fail) */
static inline uint8_t *
pin(const rc_side *s)
{
    uint8_t *b = s->io->pin(s->io->ctx);
    if (b == NULL)
        s->io->fail(s->io->ctx, RC_ERR_CLOSED, 0.0);
    return b;
}

static inline void
unpin(const rc_side *s)
{
    s->io->unpin(s->io->ctx);
}

/* The step's tracepoint, then the mapping; NULL: return *err */
#define BEGIN(s, action, reader, base, err)                                                          \
    do {                                                                                             \
        if (trace((s), (action), (reader)) != RC_OK)                                                 \
            return RC_ERR_RAISED;                                                                    \
        if (((base) = pin(s)) == NULL)                                                               \
            return (err);                                                                            \
    } while (0)

static inline size_t
next_chunk(const rc_side *s)
{
    return s->index + 1 == s->layout->max_chunks ? 0 : s->index + 1;
}

/* -- the writer -- */

/* Spec: WriterClaim. Is the chunk at the cursor writable (0?..?) or read by every reader (11..1)? */
RC_FENCED static int
writer_claim(rc_writer *w, int *free_)
{
    rc_side *s = &w->s;
    uint8_t *base;
    BEGIN(s, RC_WriterClaim, RC_NO_READER, base, RC_ERR_CLOSED);
    const uint8_t *m = base + s->layout->metas[s->index];
    int written = rc_load_u8(m), all_read = 1;
    for (uint32_t r = 0; r < s->layout->n_reader; r++)
        all_read &= rc_load_u8(m + 1 + r) == 1; /* every flag is loaded, as the spec's claim does */
    RC_F1(); /* F1 pairs with F5 in reader_ack (and F8 in reader_check_evicted): no payload store before the loads that showed the chunk free */
    unpin(s);
    *free_ = written == 0 || all_read;
    return RC_OK;
}

/* Spec: WriterClearWritten. No fence: F7 orders this store before the read-flag clears. */
static int
writer_clear_written(rc_writer *w)
{
    rc_side *s = &w->s;
    uint8_t *base;
    BEGIN(s, RC_WriterClearWritten, RC_NO_READER, base, RC_ERR_CLOSED);
    rc_store_u8(base + s->layout->metas[s->index], 0);
    unpin(s);
    return RC_OK;
}

/* Spec: WriterWritePayload. The parts back to back from the chunk's start; refused (RC_ERR_TOO_BIG,
 * io->fail's value the payload's bytes) before any store if they do not fit. */
static int
writer_write_payload(rc_writer *w, const rc_parts *parts, size_t *written)
{
    rc_side *s = &w->s;
    size_t total = 0;
    for (size_t k = 0; k < parts->n; k++)
        total += parts->lens[k];
    if (trace(s, RC_WriterWritePayload, RC_NO_READER) != RC_OK)
        return RC_ERR_RAISED;
    if (total > s->layout->max_chunk_bytes) {
        s->io->fail(s->io->ctx, RC_ERR_TOO_BIG, (double)total);
        return RC_ERR_TOO_BIG;
    }
    uint8_t *base = pin(s);
    if (base == NULL)
        return RC_ERR_CLOSED;
    uint8_t *d = base + s->layout->datas[s->index];
    for (size_t k = 0; k < parts->n; k++) {
        if (parts->lens[k])
            memcpy(d, parts->bufs[k], parts->lens[k]);
        d += parts->lens[k];
    }
    unpin(s);
    if (written != NULL)
        *written = total;
    return RC_OK;
}

/* Spec: WriterClearReadFlag */
static int
writer_clear_read_flag(rc_writer *w, uint32_t r)
{
    rc_side *s = &w->s;
    uint8_t *base;
    BEGIN(s, RC_WriterClearReadFlag, (int)r, base, RC_ERR_CLOSED);
    rc_store_u8(base + s->layout->metas[s->index] + 1 + r, 0);
    unpin(s);
    return RC_OK;
}

/* Spec: WriterPublish. written := 1; the cursor moves on by one. */
RC_FENCED static int
writer_publish(rc_writer *w)
{
    rc_side *s = &w->s;
    uint8_t *base;
    BEGIN(s, RC_WriterPublish, RC_NO_READER, base, RC_ERR_CLOSED);
    RC_F3(); /* F3 pairs with F4 in rc_reader_look: payload and cleared flags visible before the publication */
    rc_store_u8(base + s->layout->metas[s->index], 1);
    unpin(s);
    s->index = next_chunk(s);
    return RC_OK;
}

/* Spec: WriterEvict. Reader r is dead: mark it evicted in the reader table, set its read flag in
 * every chunk (no chunk waits for it) and never clear its flag again (live[r] := 0). Only the
 * writer, between messages (spec: evict_correct; evict_keeps_clearing shows why the flag must
 * stay set). */
static int
writer_evict(rc_writer *w, uint32_t r)
{
    rc_side *s = &w->s;
    const rc_layout *L = s->layout;
    uint8_t *base;
    BEGIN(s, RC_WriterEvict, (int)r, base, RC_ERR_CLOSED);
    uint32_t evicted = RC_READER_EVICTED; /* the state word, little-endian like its readers expect */
    for (int b = 0; b < 4; b++)
        rc_store_u8(base + L->states[r] + b, (uint8_t)(evicted >> (8 * b)));
    for (uint32_t i = 0; i < L->max_chunks; i++)
        rc_store_u8(base + L->metas[i] + 1 + r, 1);
    unpin(s);
    w->live[r] = 0;
    return RC_OK;
}

/* -- a reader -- */

/* The one definition of "reader r is evicted": its state word's low byte is RC_READER_EVICTED
 * (WriterEvict stores the whole little-endian word). A load, not a step: ReaderCheckEvicted's,
 * and a parked reader's look before each park (rc_core.c: reader_idle). */
static inline int
evicted_at(const uint8_t *base, const rc_layout *L, uint32_t r)
{
    return rc_load_u8(base + L->states[r]) == RC_READER_EVICTED;
}

static int
reader_load(rc_reader *rd, rc_action action, size_t extra, int *v)
{
    rc_side *s = &rd->s;
    uint8_t *base;
    BEGIN(s, action, RC_NO_READER, base, RC_ERR_CLOSED);
    *v = rc_load_u8(base + s->layout->metas[s->index] + extra);
    unpin(s);
    return RC_OK;
}

/* Spec: ReaderLoadWritten */
static int
reader_load_written(rc_reader *rd, int *v)
{
    return reader_load(rd, RC_ReaderLoadWritten, 0, v);
}

/* Spec: ReaderLoadReadFlag */
static int
reader_load_read_flag(rc_reader *rd, int *v)
{
    return reader_load(rd, RC_ReaderLoadReadFlag, 1 + rd->r, v);
}

/* Spec: ReaderCopy. The step point of the copy (the copy itself is the caller's: io->copy_out,
 * or the zero-copy block); the chunk's data. */
static int
reader_copy(rc_reader *rd, const uint8_t **data)
{
    rc_side *s = &rd->s;
    uint8_t *base;
    BEGIN(s, RC_ReaderCopy, RC_NO_READER, base, RC_ERR_CLOSED);
    *data = base + s->layout->datas[s->index];
    unpin(s);
    return RC_OK;
}

/* Spec, without a step point: ReaderCheckEvicted (EvictCheck). After the copy, before it is
 * returned and acked: whether the writer evicted this reader. A live reader wrongly judged dead
 * (another PID namespace) may have copied a chunk the writer refilled after evicting it: the copy
 * must then be dropped (spec: evict_park_false_suspect fails InOrder without this check). No step
 * point: the harness's models have no eviction, where this load always says no. */
RC_FENCED static int
reader_check_evicted(rc_reader *rd, int *evicted)
{
    rc_side *s = &rd->s;
    uint8_t *base = pin(s);
    if (base == NULL)
        return RC_ERR_CLOSED;
    RC_F8(); /* F8 pairs with F1 in writer_claim: the copy's loads come before the evicted load, so a copy that saw a refill sees the eviction */
    *evicted = evicted_at(base, s->layout, rd->r);
    unpin(s);
    return RC_OK;
}

/* Spec: ReaderAck. read_r := 1; the cursor moves on by one. */
RC_FENCED static int
reader_ack(rc_reader *rd)
{
    rc_side *s = &rd->s;
    uint8_t *base;
    BEGIN(s, RC_ReaderAck, RC_NO_READER, base, RC_ERR_CLOSED);
    RC_F5(); /* F5 pairs with F1 in writer_claim: the copy is complete before the writer may reuse the chunk */
    rc_store_u8(base + s->layout->metas[s->index] + 1 + rd->r, 1);
    unpin(s);
    s->index = next_chunk(s);
    return RC_OK;
}
