/* harness.h: what the verify/genmc/ harnesses share (test code). It compiles the protocol core
 * itself (src/ringcast/core/rc_core.c, the file the extension is built from; the fence switches
 * are the core's -DRINGCAST_TEST_DROP_Fx) and fills the core's rc_iface with models of what the
 * operating system and the binding do:
 *
 *   - the mapping: one static byte array laid out as ringcast.layout lays out a segment
 *     (chunk metas, chunk data, reader state words, the two eventcounts);
 *   - the futex: futex_model.h (a lost wake-up is a thread blocked forever: --check-liveness);
 *   - the payload copy: the core's memcpy (WriterWritePayload) and the binding's copy_out
 *     (ReaderCopy) are word-by-word plain, non-atomic accesses, so that under RC11 any copy not
 *     ordered by the protocol's fences against the other side's accesses is a data race that
 *     GenMC reports, and under IMM (no notion of race) a stale or torn copy fails the checks;
 *   - the overflow channel: fifo_model.h (per reader, in order, nothing lost: a ZeroMQ XPUB);
 *   - time: no timeouts; the clock reads 0 except where a harness lets a park time out
 *     (eviction: only a dead or suspected reader makes a wait end without a wake);
 *   - liveness: probe answers from the harness's own table (dead / false suspect);
 *   - a poller's descriptor (io->signal, the descriptor wait of core/rc_poll.c): a counter per
 *     side that the signal increments; poll.c's readers drain it (read it) before each round and
 *     sleep until it moves (no timeout: a lost wake-up is a thread blocked forever). The other
 *     harnesses' readers never arm a poll flag, so their notifies load a count of 0 and signal
 *     nobody.
 *
 * The harness's threads record what each reader delivered; main checks, after joining, that
 * every reader got exactly the writer's published messages in order. */
#ifndef RC_HARNESS_H
#define RC_HARNESS_H
#include <pthread.h>
#include <assert.h>
#include <stdint.h>
#include <stddef.h>
#include <string.h>

#ifndef N_CHUNKS
#define N_CHUNKS 1
#endif
#ifndef N_READERS
#define N_READERS 2
#endif
#ifndef PAYLOAD_WORDS
#define PAYLOAD_WORDS 1
#endif
#ifndef M
#define M 3
#endif

/* The payload copy, as GenMC can explore it: GenMC refuses a memcpy between runtime pointers
 * ("Invalid call to memcpy()"); this is the same copy, 32-bit word by word (every payload the
 * harnesses write is whole words, so the core's stores and copy_out's loads have one size). */
static inline void *
rc_h_copy(void *dst, const void *src, size_t n)
{
    uint32_t *d = (uint32_t *)dst;
    const uint32_t *s = (const uint32_t *)src;
    assert(n % 4 == 0);
    for (size_t k = 0; k < n / 4; k++)
#ifdef H_RACY_COPY
        __atomic_store_n(d + k, s[k], __ATOMIC_RELAXED); /* H_RACY_COPY: a false suspect's copy (README) */
#else
        d[k] = s[k];
#endif
    return dst;
}
/* The core's memset(s, 0, sizeof *s) clears a side's struct at init: the harness keeps every
 * such struct in zeroed static storage and initialises it once, so the clear is a no-op (a byte
 * memset would also make GenMC see mixed-size accesses on the struct's fields). */
static inline void *
rc_h_zero(void *dst, int c, size_t n)
{
    (void)n;
    assert(c == 0);
    return dst;
}
#define memcpy(d, s, n) rc_h_copy((d), (s), (n))
#define memset(d, c, n) rc_h_zero((d), (c), (n))
#define RINGCAST_TEST_NO_SPIN_HINT 1 /* a compiler barrier instead of `pause` (no memory effect) */

#include "futex_model.h"
#include "core/rc_core.c"
#undef memcpy
#undef memset

/* -- the mapping ----------------------------------------------------------------------------- */

#define H_META(i) ((size_t)(i) * 4)                         /* written, read_0, read_1, pad */
#define H_DATA(i) (16 + (size_t)(i) * 4 * PAYLOAD_WORDS)    /* the chunk's words */
#define H_STATE(r) (32 + (size_t)(r) * 4)                   /* reader r's state word */
#define H_EC 48                                              /* write_seq, reader_waiters, read_seq, writer_waiters */
#define H_POLL(r) (64 + (size_t)(r) * 4)                    /* reader r's poll flag */
#define H_WPOLL 76                                           /* the writer's poll flag */
#define H_POLLERS 80                                         /* reader_pollers, writer_pollers */
_Static_assert(N_CHUNKS <= 4 && N_READERS <= 3 && 16 + N_CHUNKS * 4 * PAYLOAD_WORDS <= 32, "harness layout");

static uint8_t h_mapping[88] __attribute__((aligned(8)));
static const size_t h_metas[N_CHUNKS] = {H_META(0)
#if N_CHUNKS > 1
                                         , H_META(1)
#endif
};
static const size_t h_datas[N_CHUNKS] = {H_DATA(0)
#if N_CHUNKS > 1
                                         , H_DATA(1)
#endif
};
static const size_t h_states[N_READERS] = {H_STATE(0)
#if N_READERS > 1
                                           , H_STATE(1)
#endif
};
static const size_t h_polls[N_READERS] = {H_POLL(0)
#if N_READERS > 1
                                          , H_POLL(1)
#endif
};
static const rc_layout h_layout = {
    .n_reader = N_READERS, .max_chunks = N_CHUNKS, .max_chunk_bytes = 4 * PAYLOAD_WORDS,
    .metas = h_metas, .datas = h_datas, .states = h_states,
    .write_seq = H_EC, .reader_waiters = H_EC + 4, .read_seq = H_EC + 8, .writer_waiters = H_EC + 12,
    .polls = h_polls, .writer_poll = H_WPOLL, .reader_pollers = H_POLLERS, .writer_pollers = H_POLLERS + 4,
};
/* Park at once (no spin phase), on the futex, for as long as it takes (no recheck timeout). */
static const rc_policy h_policy = {.spin = 0.0, .recheck_interval = 1e9, .tight_looks = 0, .use_futex = 1};

/* -- a payload: every word holds the message's number; the top bit of word 0 marks an
 *    overflow marker (the payload then travels on the FIFO) -- */
#define H_MARKER 0x80000000u

/* -- per-thread context ---------------------------------------------------------------------- */

typedef struct h_ctx {
    int side;                    /* RC_WRITER or the reader */
    uint32_t got[M + 1];         /* a reader's delivered messages, in order */
    int n_got;
    uint32_t pending[PAYLOAD_WORDS]; /* copy_out's copy, delivered once the receive returns RC_OK */
    uint32_t marker_of;          /* the message number the last marker chunk carried */
    int failed;                  /* the last rc_status io->fail reported */
} h_ctx;

static h_ctx h_writer_ctx = {.side = RC_WRITER};
static h_ctx h_reader_ctx[N_READERS];
static rc_writer h_w;
static rc_reader h_rd[N_READERS];
static rc_counters h_wc, h_rc[N_READERS];
static rc_cancel h_cancel;
static uint8_t h_live[N_READERS], h_liveness[N_READERS];

/* what probe answers for reader r: dead (or a false suspect: alive, reported dead) */
static int h_dead[N_READERS];

/* The writer's record, kept by the step hook (writer thread only; main reads it after joining):
 * the message whose payload each chunk holds, and the messages published, in order. */
static uint32_t h_msg;                   /* the message the writer is publishing (h_sending too) */
static uint32_t h_chunk_msg[N_CHUNKS];
static uint32_t h_published[M + 1];
static int h_n_published;

/* Abort injection: the ABORT_NTH-th step ABORT_ACTION of message ABORT_MSG fails (the hook
 * returns non-zero: the step has not happened, the core unwinds with RC_ERR_RAISED). */
static int h_abort_seen, h_aborted;
static int h_pre_look; /* the writer's pre-look (h_await_*): not one of the sequence's steps */

static int
h_hook(rc_action a, int side, size_t index, int reader)
{
    (void)reader;
    if (side != RC_WRITER || h_pre_look)
        return 0;
#ifdef ABORT_ACTION
    if (h_msg == ABORT_MSG && a == ABORT_ACTION && ++h_abort_seen == ABORT_NTH) {
        h_aborted = 1;
        return 1;
    }
#endif
    if (a == RC_WriterWritePayload)
        h_chunk_msg[index] = h_msg;
    if (a == RC_WriterPublish) {
        assert(h_n_published < M + 1);
        h_published[h_n_published++] = h_chunk_msg[index];
    }
    return 0;
}

#include "fifo_model.h"

static uint8_t *h_pin(void *ctx) { (void)ctx; return h_mapping; }
static void h_unpin(void *ctx) { (void)ctx; }
static double h_now(void *ctx) { (void)ctx; return 0.0; }
static int h_check_signals(void *ctx) { (void)ctx; return RC_OK; }

/* A sleep may end by timing out only where that is the way on (futex_model.h): the writer, held
 * by a reader reported dead that it has not evicted yet (it then probes and evicts it); a reader
 * that was evicted (its next dead-peer check finds that out). Otherwise sleeps end by a wake. */
static inline int
h_may_time_out(h_ctx *c)
{
#ifndef DEAD_READER
    (void)c;
    return 0; /* nobody is reported dead: every sleep ends by a wake */
#else
    if (c->side != RC_WRITER)
        return rc_load_u8(h_mapping + H_STATE(c->side)) == RC_READER_EVICTED;
    const uint8_t *m = h_mapping + H_META(h_w.s.index);
    for (int r = 0; r < N_READERS; r++)
        if (__atomic_load_n(&h_dead[r], __ATOMIC_SEQ_CST) && h_w.live[r] && rc_load_u8(m) == 1
            && rc_load_u8(m + 1 + r) == 0)
            return 1;
    return 0;
#endif
}

/* The futex word's slot in futex_model.h: write_seq 0, read_seq 1 */
static inline int
h_futex_slot(uint32_t *word)
{
    return (uint8_t *)word == h_mapping + h_layout.write_seq ? 0 : 1;
}

static int
h_futex_wait(void *ctx, uint32_t *word, uint32_t expected, double timeout)
{
    (void)timeout;
    int k = h_futex_slot(word);
    uint32_t g;
    if (fm_futex_sleep(k, word, expected, &g))
        return RC_CHANGED;
    for (;;) { /* asleep */
        if (fm_woken(k, g))
            return RC_WOKEN;
        if (h_may_time_out((h_ctx *)ctx))
            return RC_TIMED_OUT;
    }
}
static int h_futex_wake(void *ctx, uint32_t *word) { (void)ctx; fm_futex_wake(h_futex_slot(word)); return RC_OK; }
static void h_yield(void *ctx) { (void)ctx; }
static int h_sleep(void *ctx, double s) { (void)ctx, (void)s; return RC_OK; }

/* Liveness. The writer's probe of reader r: h_dead[r]. A reader's probe of the writer (who ==
 * RC_WRITER): alive (the core itself finds a parked reader's eviction, as in production). */
static int
h_probe(void *ctx, int who, double waited)
{
    (void)ctx, (void)waited; /* the writer never dies here; a reader's eviction is the core's to find */
    if (who != RC_WRITER)
        return __atomic_load_n(&h_dead[who], __ATOMIC_SEQ_CST) ? RC_DEAD : RC_ALIVE;
    return RC_ALIVE;
}
/* A poller's descriptor (io->signal): h_descriptor[who] counts the signals (the writer's is
 * [N_READERS]); a poller drains it by reading it before its round (h_drain) and sleeps until it
 * moves (h_sleep_on_descriptor): a signal after the drain leaves it "readable". The count is a
 * seq_cst RMW, as the wake pipe's write is a system call after the core's seq_cst exchange. */
static uint32_t h_descriptor[N_READERS + 1];

static int
h_signal(void *ctx, int who)
{
    (void)ctx;
    __atomic_fetch_add(&h_descriptor[who == RC_WRITER ? N_READERS : who], 1, __ATOMIC_SEQ_CST);
    return RC_OK;
}

static inline uint32_t
h_drain(int who)
{
    return __atomic_load_n(&h_descriptor[who == RC_WRITER ? N_READERS : who], __ATOMIC_SEQ_CST);
}

/* The event loop asleep on the descriptor until it is readable: a loop without side effects,
 * which GenMC turns into an assume (no timeout: --check-liveness reports a sleeper no signal
 * releases) */
static inline void
h_sleep_on_descriptor(int who, uint32_t drained)
{
    while (h_drain(who) == drained) {
    }
}

static int h_report(void *ctx, int event, double waited) { (void)ctx, (void)event, (void)waited; return RC_OK; }
static void h_fail(void *ctx, rc_status code, double waited) { (void)waited; ((h_ctx *)ctx)->failed = code; }

/* ReaderCopy's copy (the binding's copy_out): plain loads of the chunk's words into `pending`
 * (delivered when the receive returns RC_OK: a copy dropped as evicted is not). A marker's
 * number is kept for its FIFO payload. */
static int
h_copy_out(void *ctx, const uint8_t *data, size_t len)
{
    h_ctx *c = (h_ctx *)ctx;
    assert(len == sizeof c->pending);
#ifdef H_RACY_COPY
    for (int k = 0; k < PAYLOAD_WORDS; k++) /* a false suspect's copy may race a refill (README) */
        c->pending[k] = __atomic_load_n((const uint32_t *)data + k, __ATOMIC_RELAXED);
#else
    rc_h_copy(c->pending, data, len);
#endif
    if (c->pending[0] & H_MARKER) {
        c->marker_of = c->pending[0] & ~H_MARKER;
        return RC_MARKER;
    }
    return RC_COPIED;
}

static const rc_iface h_writer_io = {
    .ctx = &h_writer_ctx, .pin = h_pin, .unpin = h_unpin, .now = h_now, .check_signals = h_check_signals,
    .futex_wait = h_futex_wait, .futex_wake = h_futex_wake, .yield = h_yield, .sleep = h_sleep,
    .probe = h_probe, .send_overflow = h_send_overflow, .recv_overflow = h_recv_overflow,
    .copy_out = h_copy_out, .report = h_report, .fail = h_fail, .signal = h_signal,
};
static rc_iface h_reader_io[N_READERS];

#include <genmc.h> /* __VERIFIER_assume */

/* Without -DPARK the harness waits for a side's look to succeed before it calls the core's entry
 * point: one look (the core's own rc_writer_look / rc_reader_look: the same loads and fences),
 * then an assume that it succeeded. That is GenMC's spin-assume encoding of a spin loop of looks
 * (an execution whose look fails is cut; the one where the look reads the newer values is
 * explored), and it keeps most executions out of the core's park, which multiplies them. The
 * entry point then looks again: that look usually succeeds too, but not always (a reader's
 * pre-look may pair an old written = 1 with a freshly cleared flag, its second look the new
 * written = 0), and then the core waits and parks as it does in production: the park is
 * exercised in these runs too (that is how they show F6N and F6W). With -DPARK the harness calls
 * the entry points directly and every wait parks on the futex model. */
static uint32_t h_writer_wakes; /* H_WRITER_POLLS: the writer's wake-ups (a plain counter: poll.c's h_wakes) */

static void
h_await_writer(void)
{
#if defined(H_WRITER_POLLS)
    /* writer_poll.c: the descriptor wait, as an event loop does before enqueue_async's attempt:
     * drain the descriptor, one round rc_writer_poll(arm = 1, check = 0), not ready: sleep until
     * a reader's notify signals it; ready: the publish's claim finds the chunk free */
    for (;;) {
        uint32_t drained = h_drain(RC_WRITER);
        int ready = 0, rc = rc_writer_poll(&h_w, 1, 0, &ready);
        assert(rc == RC_OK);
        if (ready)
            return;
        h_sleep_on_descriptor(RC_WRITER, drained);
        h_writer_wakes++;
    }
#elif !defined(PARK) && !defined(DEAD_READER) /* (a dead reader is evicted from the core's wait) */
    int free_ = 0;
    h_pre_look = 1;
    int rc = rc_writer_look(&h_w, &free_);
    h_pre_look = 0;
    __VERIFIER_assume(rc == RC_OK && free_);
#endif
}

static void
h_await_reader(int r)
{
#if (defined(DEAD_READER) || defined(H_WRITER_POLLS)) && !defined(PARK)
    /* With eviction the writer has no pre-look and parks in the core (writer_poll.c's writer
     * sleeps on its descriptor: H_WRITER_POLLS, for the same reason), so an execution can hold
     * the writer asleep in the futex model's loop while a reader's pre-look failed. GenMC 0.10.3
     * runs its liveness check on such a blocked execution and ignores a thread blocked by an
     * assume: a failed assume-look here would be reported as a writer blocked forever (it was:
     * the reader's pre-look read a stale written = 0, or its own ack of the previous message).
     * So the pre-look is a loop GenMC turns into a spin-assume (plain loads, no side effect):
     * a reader blocked in it on stale values is not "reading maximal", and is no false verdict.
     * It ends when the chunk looks ready, or when this reader is evicted (its flags are 1 for
     * good: the core's wait then finds the eviction). */
    const uint8_t *m = h_mapping + H_META(h_rd[r].s.index);
    while (!(rc_load_u8(m) == 1 && rc_load_u8(m + 1 + r) == 0)
           && rc_load_u8(h_mapping + H_STATE(r)) != RC_READER_EVICTED) {
    }
#elif !defined(PARK)
    int ready = 0, rc = rc_reader_look(&h_rd[r], &ready);
    __VERIFIER_assume(rc == RC_OK && ready);
#else
    (void)r;
#endif
}

/* The writer publishes messages 1..M (message OVERFLOW_MSG, if defined, as a marker whose
 * payload goes on the FIFO); an injected abort ends one publish with RC_ERR_RAISED, and the
 * writer goes on with the next message (which first finishes what the abort left owed). */
static void *
h_writer(void *arg)
{
    (void)arg;
    for (uint32_t k = 1; k <= M; k++) {
        uint32_t buf[PAYLOAD_WORDS];
        int overflow = 0;
#ifdef OVERFLOW_MSG
        overflow = k == OVERFLOW_MSG;
#endif
        for (int j = 0; j < PAYLOAD_WORDS; j++)
            buf[j] = k;
        if (overflow)
            buf[0] |= H_MARKER;
        const void *bufs[1] = {buf};
        size_t lens[1] = {sizeof buf};
        rc_parts parts = {1, bufs, lens};
        h_msg = h_sending = k;
        if (h_w.owed_chunk < 0 && !h_w.wake_owed)
            h_await_writer(); /* (with something owed, the finish moves the cursor first) */
        int rc = rc_writer_publish(&h_w, &parts, overflow, 0, RC_NO_TIMEOUT);
        assert(rc == RC_OK || (rc == RC_ERR_RAISED && h_aborted && k == h_msg));
    }
    assert(rc_writer_finish(&h_w) == RC_OK);
    assert(h_w.owed_chunk < 0 && !h_w.wake_owed);
    return NULL;
}

/* Reader r receives until it has message M (the last, never aborted), or until it dies
 * (after DEAD_AFTER messages, if it is the dead reader) or learns it was evicted. */
static void *
h_reader(void *arg)
{
    int r = (int)(intptr_t)arg;
    h_ctx *c = &h_reader_ctx[r];
    while (c->n_got == 0 || c->got[c->n_got - 1] != M) {
#ifdef DEAD_READER
        if (r == DEAD_READER && c->n_got == DEAD_AFTER)
            return NULL; /* dies: the writer's probe says so (h_dead, set in main) */
#endif
        if (!h_rd[r].owed_payload)
            h_await_reader(r);
        int marker = 0, rc = rc_reader_receive(&h_rd[r], RC_NO_TIMEOUT, &marker);
        if (rc == RC_ERR_EVICTED || (rc == RC_ERR_RAISED && c->failed == RC_ERR_EVICTED)) {
            assert(__atomic_load_n(&h_dead[r], __ATOMIC_SEQ_CST)); /* only a reader reported dead */
            return NULL;
        }
        assert(rc == RC_OK);
        if (!marker) {
            for (int k = 1; k < PAYLOAD_WORDS; k++)
                assert(c->pending[k] == c->pending[0]); /* one message's words: not torn */
            assert(c->n_got < M);
            c->got[c->n_got++] = c->pending[0];
        }
    }
    return NULL;
}

/* The readers' thread function: h_reader, or a harness's own (poll.c: H_READER_FN) */
#ifndef H_READER_FN
#define H_READER_FN h_reader
#endif

/* Set up both sides, run the writer and the readers, join, check. `dead`: the readers probe
 * reports dead. */
static void
h_run(void)
{
    pthread_t w, rd[N_READERS];
    rc_step_hook = h_hook;
#ifdef DEAD_READER
    h_dead[DEAD_READER] = 1;
#endif
    rc_writer_init(&h_w, &h_layout, &h_writer_io, &h_policy, &h_wc, &h_cancel, h_live, h_liveness);
#ifdef DEAD_READER
    h_w.evict_dead = 1;
#endif
#ifdef H_PLANT_WRITER /* a planted bug of tests/stateful (-DRINGCAST_TEST_PLANTED: core/rc_planted.c) */
    h_w.s.planted = H_PLANT_WRITER;
#endif
    for (int r = 0; r < N_READERS; r++) {
        h_reader_ctx[r].side = r;
        h_reader_io[r] = h_writer_io;
        h_reader_io[r].ctx = &h_reader_ctx[r];
        rc_reader_init(&h_rd[r], (uint32_t)r, &h_layout, &h_reader_io[r], &h_policy, &h_rc[r], &h_cancel);
    }
    pthread_create(&w, NULL, h_writer, NULL);
    for (int r = 0; r < N_READERS; r++)
        pthread_create(&rd[r], NULL, H_READER_FN, (void *)(intptr_t)r);
    pthread_join(w, NULL);
    for (int r = 0; r < N_READERS; r++)
        pthread_join(rd[r], NULL);
    /* Every reader not reported dead delivered exactly the published messages, in order (no
     * loss, no duplicate, nothing unpublished); a reader reported dead, a prefix of them. */
    for (int r = 0; r < N_READERS; r++) {
        h_ctx *c = &h_reader_ctx[r];
        if (!h_dead[r])
            assert(c->n_got == h_n_published);
        for (int j = 0; j < c->n_got; j++)
            assert(c->got[j] == h_published[j]);
    }
    assert(h_published[h_n_published - 1] == M);
}
#endif
