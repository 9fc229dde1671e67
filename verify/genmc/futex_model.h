/* futex_model.h: the kernel's futex, as GenMC sees it (test code for verify/genmc/ harnesses).
 *
 * What the harnesses rely on is FUTEX_WAIT's documented guarantee: "check that *p still holds
 * `expected`, then sleep" is atomic with respect to FUTEX_WAKE(p): a wake that comes after a
 * store the check did not see finds the sleeper queued and releases it. The kernel gets that from
 * its bucket lock and full barriers; the model gets it from sequentially consistent accesses
 * (cheaper for GenMC than a mutex): each futex word k has a wake generation; a sleeper reads the
 * generation, then checks the word (both seq_cst); a waker increments the generation (a seq_cst
 * RMW) after its own store to the word. If the check missed the waker's store, the generation the
 * sleeper read precedes the waker's increment (SC order), so the sleeper wakes; if it saw the
 * store, it does not sleep. (FUTEX_WAKE wakes every sleeper: the eventcount's wake-all.)
 *
 * The sleep is a loop waiting for the generation to move, with no side effect: GenMC turns it into
 * an assume, and with --check-liveness an execution in which no wake ever comes is reported as a
 * non-terminating spin loop, i.e. a thread blocked forever (a lost wake-up). The shipped park
 * sleeps at most recheck_interval, which turns a lost wake-up into latency; the model has no
 * timeout, so that the loss is visible (as the TLA+ park models do), except where the harness
 * lets a sleep time out (harness.h: h_may_time_out, the dead-peer checks' way on). */
#ifndef RC_FUTEX_MODEL_H
#define RC_FUTEX_MODEL_H
#include <stdint.h>

#define FM_WORDS 2
static uint32_t fm_generation[FM_WORDS];

/* FUTEX_WAIT's check: 1 if *p != expected (the call returns at once), else 0: the caller sleeps
 * until fm_woken(k, *g). */
static inline int
fm_futex_sleep(int k, uint32_t *p, uint32_t expected, uint32_t *g)
{
    *g = __atomic_load_n(&fm_generation[k], __ATOMIC_SEQ_CST);
    return __atomic_load_n(p, __ATOMIC_SEQ_CST) != expected;
}

/* Has a FUTEX_WAKE released the sleeper that read generation g of word k? */
static inline int
fm_woken(int k, uint32_t g)
{
    return __atomic_load_n(&fm_generation[k], __ATOMIC_SEQ_CST) != g;
}

/* FUTEX_WAKE on word k: every sleeper */
static inline void
fm_futex_wake(int k)
{
    __atomic_fetch_add(&fm_generation[k], 1, __ATOMIC_SEQ_CST);
}
#endif
