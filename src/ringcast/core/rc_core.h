/* rc_core.h: the protocol core of ringcast, in plain C (no CPython header): for each side the whole
 * per-message state machine of spec/Ring.tla, its state, and the one interface (rc_iface) through
 * which it asks for what it cannot do itself.
 *
 *   writer (rc_writer_publish; rc_writer_acquire + rc_writer_commit / rc_writer_abort):
 *     [finish owed] claim (WriterClaim: look, spin, park on read_seq, dead-reader checks)
 *     WriterClearWritten, WriterWritePayload, [WriterSendOverflow], F7, WriterClearReadFlag for
 *     each live reader, WriterPublish (F3), notify (F6N NotifyLoadWaiters [NotifyWake]).
 *     An error at any step: the message is dropped while no read flag of its chunk was cleared
 *     and no overflow payload sent; after that it is owed (finished, never dropped: FlagOut).
 *   reader (rc_reader_receive; rc_reader_acquire + rc_reader_release):
 *     [owed payload: ReaderRecvOverflow] look (ReaderLoadWritten, ReaderLoadReadFlag, F4; spin,
 *     park on write_seq; before each park: evicted? gone; the writer's liveness), ReaderCopy, F8,
 *     ReaderCheckEvicted (evicted: gone, no ack), ReaderAck (F5), notify, [marker: ReaderRecvOverflow].
 *
 * Every access to the shared mapping goes through rc_fences.h's primitives, between
 * io->pin and io->unpin (the binding keeps the mapping open meanwhile; a closed ring is
 * RC_ERR_CLOSED); pins may nest (a park holds one around its re-check's steps). The payload is
 * copied with plain memcpy (the data a race would tear). The core allocates nothing: the caller
 * owns every struct and array below.
 *
 * Error handling: a function returns RC_OK (0) or a negative rc_status. An interface call that
 * fails returns RC_ERR_RAISED (the binding has an exception pending) and the core unwinds. An
 * error the core detects itself (timeout, cancel, dead readers, eviction, a payload too big, a
 * closed ring) is first reported with io->fail(ctx, code, ...) (the binding turns it into the
 * project's exception), then unwinds the same way. */
#ifndef RC_CORE_H
#define RC_CORE_H

#include <stddef.h>
#include <stdint.h>

/* ------------------------------------------------------------------------- status codes -- */

typedef enum rc_status {
    RC_OK = 0,
    RC_ERR_RAISED = -1,       /* an interface call failed (the binding holds the error) */
    RC_ERR_TIMEOUT = -2,      /* a wait ran past its timeout */
    RC_ERR_CANCELLED = -3,    /* the side's rc_cancel was set (shutdown) */
    RC_ERR_DEAD_READERS = -4, /* the writer waits for readers found dead, and does not evict */
    RC_ERR_EVICTED = -5,      /* this reader was evicted (it is gone: it receives nothing more) */
    RC_ERR_TOO_BIG = -6,      /* the payload's parts do not fit the chunk */
    RC_ERR_CLOSED = -7,       /* the mapping is gone (io->pin answered NULL) */
    RC_ERR_SYSTEM = -8,       /* a futex call failed (errno kept) */
    RC_ERR_STATE = -9,        /* an entry point called out of order (acquire twice, commit without acquire) */
} rc_status;

/* ------------------------------------------------------------------- the spec's actions -- */

/* One per TLA+ action of spec/Ring.tla that has a step point (the hook's `action`). */
typedef enum rc_action {
    RC_WriterClaim,
    RC_WriterClearWritten,
    RC_WriterWritePayload,
    RC_WriterSendOverflow,
    RC_WriterClearReadFlag,
    RC_WriterPublish,
    RC_WriterEvict,
    RC_ReaderLoadWritten,
    RC_ReaderLoadReadFlag,
    RC_ReaderCopy,
    RC_ReaderCheckEvicted, /* no step point (rc_step only): the harness's models have no eviction */
    RC_ReaderAck,
    RC_ReaderRecvOverflow,
    RC_ParkSnapshot,
    RC_ParkAnnounce,
    RC_ParkRecheck,
    RC_ParkSleep,
    RC_ParkRetire,
    RC_NotifyLoadWaiters,
    RC_NotifyWake,
    RC_PollArm,      /* the descriptor wait (rc_poll.c) */
    RC_PollRecheck,
    RC_PollDisarm,
    RC_NotifySignal,
    RC_N_ACTIONS
} rc_action;

/* "WriterClaim", ...: the spec's names, indexed by rc_action */
extern const char *const rc_action_names[RC_N_ACTIONS];

#define RC_WRITER (-1) /* the writer's side number (a reader's is its index) */
#define RC_NO_READER (-1)

/* The step hook: the single tracepoint, called before each step's shared-memory access with the
 * stepping side, the chunk it is at and the reader a writer action acts on (else RC_NO_READER).
 * Non-zero: the step has not happened and the core unwinds with RC_ERR_RAISED. NULL in
 * production (one NULL test per step); process-wide, as the Python hook is. */
typedef int (*rc_hook_fn)(rc_action action, int side, size_t index, int reader);
extern rc_hook_fn rc_step_hook;

/* -------------------------------------------------------------------------------- state -- */

/* The ring's geometry: byte offsets into the mapping (ringcast.layout). */
typedef struct rc_layout {
    uint32_t n_reader, max_chunks;
    size_t max_chunk_bytes;
    const size_t *metas;  /* chunk i's written byte; reader r's read flag at metas[i] + 1 + r */
    const size_t *datas;  /* chunk i's data */
    const size_t *states; /* reader r's state word (its low byte: RC_READER_EVICTED) */
    size_t write_seq, reader_waiters; /* the eventcount readers park on (32-bit words) */
    size_t read_seq, writer_waiters;  /* the eventcount the writer parks on */
    /* the descriptor wait (rc_poll.c): each side's poll flag (32-bit: 1 armed) and, per
     * eventcount, how many of its side's flags are set */
    const size_t *polls;              /* reader r's poll flag */
    size_t writer_poll;               /* the writer's poll flag */
    size_t reader_pollers, writer_pollers;
} rc_layout;

#define RC_READER_EVICTED 1

/* How a side waits (ringcast.waiting.WaitPolicy). */
typedef struct rc_policy {
    double spin;             /* seconds of look-and-yield before parking, after a long wait */
    double recheck_interval; /* a park's longest sleep: dead-peer checks, lost wake-ups */
    uint32_t tight_looks;    /* looks before the first yield */
    int use_futex;           /* 0: park by timed sleeps (io->sleep) */
    double spin_max;         /* the adaptive spin budget's cap (spin_budget); <= spin: no adapting */
} rc_policy;

/* A side's counters (MessageQueue.statistics()). */
typedef struct rc_counters {
    uint64_t waits, spins, parks, wakeups, recheck_hits, timeouts, evictions;
    uint64_t signals; /* NotifySignal's signals sent (one write per armed poller) */
} rc_counters;

/* The cancel request of a queue object: set from any thread (rc_cancel_set), seen by every wait
 * at its next look; the binding then wakes the sleepers (rc_wake_all). */
typedef struct rc_cancel {
    uint32_t requested;
} rc_cancel;

struct rc_iface;

/* What both sides hold. */
typedef struct rc_side {
    const rc_layout *layout;
    const struct rc_iface *io;
    const rc_policy *policy;
    rc_counters *counters;
    rc_cancel *cancel;
    size_t index; /* the chunk this side is at (writes / reads next) */
    double last_wait; /* seconds the previous wait took until ready (0: none; 1e300: timed out or failed) */
    int side;     /* RC_WRITER or the reader's index */
    int planted;  /* a planted bug (rc_plant), read only by a -DRINGCAST_TEST_PLANTED build; 0 */
} rc_side;

/* The planted bugs of tests/stateful (a test build's, -DRINGCAST_TEST_PLANTED: core/rc_planted.c) */
typedef enum rc_plant {
    RC_PLANT_NONE = 0,
    RC_PLANT_REVERSED,   /* the writer publishes before it clears the read flags (OrderPublishBeforeClear) */
    RC_PLANT_SCAN_AHEAD, /* the writer's failed look moves on to the next chunk */
    RC_PLANT_SKIP,       /* a reader skips a written chunk whose flag is already 1 (SkipReader) */
    RC_PLANT_EARLY_ACK,  /* the last reader acks its first message before copying it (EarlyAck) */
    RC_PLANT_LAPPED,     /* a reader thinks itself lapped and drops a message */
} rc_plant;

/* What a writer's message is doing (rc_writer.phase). */
typedef enum rc_writer_phase {
    RC_W_IDLE,      /* between messages */
    RC_W_CLAIMED,   /* claimed, written cleared: nothing of the message is out (may be dropped) */
    RC_W_ACQUIRED,  /* rc_writer_acquire handed the chunk out; rc_writer_commit / _abort ends it */
} rc_writer_phase;

typedef struct rc_writer {
    rc_side s;
    uint8_t *live;       /* live[r]: reader r is not evicted (its flag is cleared per message); n_reader bytes */
    uint8_t *liveness;   /* scratch for the dead-reader check: RC_ALIVE / RC_DEAD / RC_UNKNOWN per reader */
    int evict_dead;      /* a reader found dead is evicted (else RC_ERR_DEAD_READERS) */
    /* what the writer owes (an error left it; the next message finishes it first) */
    long owed_chunk;     /* the chunk whose message must be published, not dropped (-1: none):
                            a read flag of it was cleared, or its overflow payload sent */
    int wake_owed;       /* a published message's notify was cut short */
    rc_writer_phase phase;
    long claimed;        /* the chunk of the message in flight (-1: none) */
    int draining;        /* a consumed wait runs: the unread scan (and so the idle checks) looks at
                            the last published chunk, not the cursor's */
} rc_writer;

typedef enum rc_reader_phase {
    RC_R_IDLE,
    RC_R_ACQUIRED, /* rc_reader_acquire handed the chunk out; rc_reader_release ends it */
    RC_R_GONE,     /* evicted: receives nothing more */
} rc_reader_phase;

typedef struct rc_reader {
    rc_side s;
    uint32_t r;
    int owed_payload;    /* a marker was acked, its overflow payload not yet received */
    rc_reader_phase phase;
} rc_reader;

/* ------------------------------------------------------------ what the core cannot do -- */

enum { RC_ALIVE = 0, RC_DEAD = 1, RC_UNKNOWN = 2, RC_UNREAD = 3 }; /* io->probe; RC_UNREAD: rc_writer.liveness, not probed yet */
enum { RC_COPIED = 0, RC_MARKER = 1 };                       /* io->copy_out */
enum { RC_WOKEN = 0, RC_CHANGED = 1, RC_TIMED_OUT = 2, RC_INTERRUPTED = 3 }; /* io->futex_wait */
enum { RC_REPORT_EVICTED = 0, RC_REPORT_LONG_WAIT = 1, RC_REPORT_DROPPED = 2 }; /* io->report */

typedef struct rc_iface {
    void *ctx; /* the binding's object, passed back to every call */
    /* the mapping's base, kept open until unpin; NULL: closed */
    uint8_t *(*pin)(void *ctx);
    void (*unpin)(void *ctx);
    /* monotonic seconds */
    double (*now)(void *ctx);
    /* pending signals (a handler may raise): RC_OK or RC_ERR_RAISED; called in the spin and park loops */
    int (*check_signals)(void *ctx);
    /* sleep while *word == expected, at most timeout seconds: RC_WOKEN .. RC_INTERRUPTED, or
     * RC_ERR_SYSTEM; may release the binding's lock (the GIL) meanwhile */
    int (*futex_wait)(void *ctx, uint32_t *word, uint32_t expected, double timeout);
    /* wake every sleeper on word: RC_OK or RC_ERR_SYSTEM */
    int (*futex_wake)(void *ctx, uint32_t *word);
    /* give up the CPU once (spin phase: sched_yield, with the binding's lock released) */
    void (*yield)(void *ctx);
    /* sleep (the no-futex park), at most seconds */
    int (*sleep)(void *ctx, double seconds);
    /* liveness of reader `who` (writer: a reader it waits for) or of the writer (who ==
     * RC_WRITER: a parked reader's check; the binding fails a dead writer): RC_ALIVE, RC_DEAD,
     * RC_UNKNOWN, or RC_ERR_RAISED. A liveness only: every eviction is the core's decision. */
    int (*probe)(void *ctx, int who, double waited);
    /* WriterSendOverflow's I/O: the message's overflow frames (held by the binding) */
    int (*send_overflow)(void *ctx);
    /* ReaderRecvOverflow's I/O: the next overflow payload (kept by the binding) */
    int (*recv_overflow)(void *ctx);
    /* ReaderCopy's copy: RC_COPIED (kept by the binding), RC_MARKER, or RC_ERR_RAISED */
    int (*copy_out)(void *ctx, const uint8_t *data, size_t len);
    /* an event the binding reports (evicted readers, a long wait, a dropped message): RC_OK or RC_ERR_RAISED */
    int (*report)(void *ctx, int event, double waited);
    /* an error the core found (RC_ERR_TIMEOUT ...): the binding records it; `value`: the seconds
     * waited (RC_ERR_TIMEOUT, RC_ERR_DEAD_READERS), the payload's bytes (RC_ERR_TOO_BIG), 1 if a
     * copy was dropped or 0 if the reader was found evicted while it waited (RC_ERR_EVICTED), else 0 */
    void (*fail)(void *ctx, rc_status code, double value);
    /* NotifySignal's I/O: make the descriptor of poller `who` (RC_WRITER or a reader) readable
     * (it armed its poll flag, which the notify has just cleared): RC_OK or RC_ERR_RAISED */
    int (*signal)(void *ctx, int who);
} rc_iface;

/* ------------------------------------------------------------------------ entry points -- */

/* The message's payload: parts written back to back from the chunk's start. */
typedef struct rc_parts {
    size_t n;
    const void *const *bufs;
    const size_t *lens;
} rc_parts;

#define RC_NO_TIMEOUT (-1.0) /* a timeout or deadline < 0: none */

/* Set up a side (index 0, nothing owed). `live` and `liveness` have n_reader bytes. */
void rc_writer_init(rc_writer *w, const rc_layout *layout, const rc_iface *io, const rc_policy *policy,
                    rc_counters *counters, rc_cancel *cancel, uint8_t *live, uint8_t *liveness);
void rc_reader_init(rc_reader *r, uint32_t reader, const rc_layout *layout, const rc_iface *io,
                    const rc_policy *policy, rc_counters *counters, rc_cancel *cancel);

/* One message, the whole sequence. `overflow`: io->send_overflow after the payload; `split`:
 * parts[0] alone first (a torn chunk: the spec's TwoStepPayload). */
int rc_writer_publish(rc_writer *w, const rc_parts *parts, int overflow, int split, double timeout);
/* Zero-copy: the same sequence up to the payload; *data is the chunk (max_chunk_bytes). */
int rc_writer_acquire(rc_writer *w, double timeout, uint8_t **data);
/* ... then F7, the flags, the publish and the notify */
int rc_writer_commit(rc_writer *w);
/* ... or nothing more: the message is dropped (nothing of it is out). Returns RC_OK or the
 * error of finishing what an earlier message owes. */
int rc_writer_abort(rc_writer *w);
/* What an error left owed: publish the owed chunk, then wake. */
int rc_writer_finish(rc_writer *w);

/* One message: RC_OK with *marker 0 (io->copy_out kept it) or 1 (its overflow payload came
 * through io->recv_overflow, which holds the overflow receive's deadline). A reader found evicted
 * (here or while parked) is gone: RC_ERR_EVICTED, phase RC_R_GONE, now and at every later call. */
int rc_reader_receive(rc_reader *r, double timeout, int *marker);
/* Zero-copy: wait, ReaderCopy's step point; *data is the chunk (max_chunk_bytes) */
int rc_reader_acquire(rc_reader *r, double timeout, const uint8_t **data, size_t *len);
/* ... then F8, ReaderCheckEvicted, ReaderAck, notify, also when the caller's block failed
 * (evicted: RC_ERR_EVICTED, the reader is gone, no ack) */
int rc_reader_release(rc_reader *r);

/* One step alone, for tests and tools: the action's step on the side (arg: the reader of
 * WriterClearReadFlag / WriterEvict; WriterWritePayload's parts go through rc_step_payload;
 * WriterSendOverflow, ReaderRecvOverflow: the interface's I/O; ParkRecheck: its tracepoint and
 * the side's look). *out: a load's value, a look's truth, else 0. Built only with RC_SINGLE_STEPS
 * (rc_single.c: the lab's test extension). */
#ifdef RC_SINGLE_STEPS
int rc_step(rc_side *s, rc_action action, int arg, long *out);
int rc_step_payload(rc_writer *w, const rc_parts *parts, size_t *written);
#endif
/* The writer's look (WriterClaim) and a reader's (ready: loads, F4), as the sequence takes them */
int rc_writer_look(rc_writer *w, int *free_);
int rc_reader_look(rc_reader *r, int *ready);
/* Look until ready: one look, then the wait (spin, park): the writer's claim, a reader's wait */
int rc_writer_claim(rc_writer *w, double timeout);
int rc_reader_wait(rc_reader *r, double timeout);
/* A side's notify of the other side (NotifyLoadWaiters [NotifyWake]) */
int rc_notify(rc_side *s);
/* The live readers that have not read the chunk at the writer's cursor (peeks, not steps; the
 * one scan, which the parked writer's checks use too): mark[r] (n_reader bytes) RC_UNREAD for
 * each, else RC_ALIVE; returns how many, or an error */
int rc_writer_unread(rc_writer *w, uint8_t *mark);

/* The descriptor wait (rc_poll.c: a side that waits in an event loop, on a descriptor its notifier
 * signals, instead of parking). One round: the side's look; not ready and `arm`: PollArm (its poll
 * flag; F6W) and PollRecheck (the look again), and if that finds it ready PollDisarm; not ready
 * and `check`: the side's idle checks (the wait's: eviction, dead peers, as before a park).
 * *ready: whether the side's next operation finds what it waits for (a reader: a message, or an
 * error at once: gone, a payload owed; the writer: a free chunk, or with rc_writer_poll_consumed
 * every live reader done with the last published chunk). Armed and not ready: the next notify of
 * the other side signals this side's descriptor (io->signal) and clears the flag. */
int rc_reader_poll(rc_reader *r, int arm, int check, int *ready);
int rc_writer_poll(rc_writer *w, int arm, int check, int *ready);
int rc_writer_poll_consumed(rc_writer *w, int arm, int check, int *ready);
/* The side stops polling: PollDisarm (its flag cleared, the count with it). */
int rc_poll_disarm(rc_side *s);
/* The writer's consumed wait: until every live reader has acknowledged the last published chunk
 * (readers read in order: every message so far), the wait and its idle checks as a claim's. */
int rc_writer_drain(rc_writer *w, double timeout);

/* The eventcount's steps on its two words (the sequence pins the mapping and calls them; the
 * lab's test extension's EventCount too, on words at fixed addresses): RC_OK or an error */
int rc_park_snapshot(const rc_side *s, uint32_t *seq, uint32_t *snap);
int rc_park_announce(const rc_side *s, uint32_t *waiters);
int rc_park_sleep(const rc_side *s, uint32_t *seq, uint32_t snap, double timeout, int *result);
int rc_park_retire(const rc_side *s, uint32_t *waiters);
int rc_notify_load_waiters(const rc_side *s, uint32_t *waiters, uint32_t *n);
int rc_notify_wake(const rc_side *s, uint32_t *seq);

/* Cancel: set the request (any thread); rc_wake_all wakes every sleeper of both eventcounts of
 * a mapping (the binding pins it: a closed ring wakes nobody, and needs not). */
void rc_cancel_set(rc_cancel *c);
int rc_cancel_requested(const rc_cancel *c);
int rc_wake_all(const rc_layout *layout, const rc_iface *io);

#endif /* RC_CORE_H */
