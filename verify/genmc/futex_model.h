/* futex_model.h: the kernel's futex, as GenMC sees it (test code for verify/genmc/ harnesses).
 *
 * FUTEX_WAIT(p, expected): under the futex bucket's lock, the kernel loads *p; if it differs from
 * `expected` the call returns at once (1, as rc_futex_wait's EAGAIN); otherwise the caller is
 * queued and sleeps until a FUTEX_WAKE on p finds it queued (0). FUTEX_WAKE(p) takes the same
 * lock and releases every queued sleeper. The lock is what makes "check the word, then sleep"
 * atomic against a wake (the kernel's documented guarantee); it is modelled by one pthread mutex.
 *
 * The sleep is a wait for the wake generation to move: a spin loop with no side effect, which
 * GenMC turns into an assume. With --check-liveness an execution in which no wake ever comes
 * is reported as a non-terminating spin loop, i.e. a thread blocked forever (a lost wake-up).
 * Timeouts: the shipped park sleeps at most recheck_interval, which turns a lost wake-up into
 * latency; the model has no timeout, so that the loss is visible (as the TLA+ park models do),
 * except where the harness lets a sleep time out (harness.h: h_may_time_out, the dead-peer
 * checks' way on). */
#ifndef RC_FUTEX_MODEL_H
#define RC_FUTEX_MODEL_H
#include <pthread.h>
#include <stdint.h>

#define FM_WORDS 4
static pthread_mutex_t fm_bucket = PTHREAD_MUTEX_INITIALIZER;
static uint32_t *fm_word[FM_WORDS];      /* guarded by fm_bucket: the futex words seen so far */
static uint32_t fm_generation[FM_WORDS]; /* per word; written under fm_bucket, the sleepers' release */

/* The slot of futex word p (taken on first use); called with fm_bucket held. */
static inline int
fm_slot(uint32_t *p)
{
    int k = 0;
    while (k < FM_WORDS - 1 && fm_word[k] != 0 && fm_word[k] != p)
        k++;
    fm_word[k] = p;
    return k;
}

/* FUTEX_WAIT's first half: under the bucket lock, 1 if *p != expected (the call returns at
 * once), else 0 with the sleeper queued: (*k, *g) is what fm_woken watches. The sleep itself is
 * the caller's loop on fm_woken (so that a harness can add its own way out, a timeout). */
static inline int
fm_futex_sleep(uint32_t *p, uint32_t expected, int *k, uint32_t *g)
{
    pthread_mutex_lock(&fm_bucket);
    if (__atomic_load_n(p, __ATOMIC_RELAXED) != expected) {
        pthread_mutex_unlock(&fm_bucket);
        return 1;
    }
    *k = fm_slot(p);
    *g = __atomic_load_n(&fm_generation[*k], __ATOMIC_RELAXED);
    pthread_mutex_unlock(&fm_bucket);
    return 0;
}

/* Has a FUTEX_WAKE released the sleeper queued at generation g of word k? */
static inline int
fm_woken(int k, uint32_t g)
{
    return __atomic_load_n(&fm_generation[k], __ATOMIC_ACQUIRE) != g;
}

static inline long
fm_futex_wake(uint32_t *p)
{
    pthread_mutex_lock(&fm_bucket);
    int k = fm_slot(p);
    __atomic_store_n(&fm_generation[k], __atomic_load_n(&fm_generation[k], __ATOMIC_RELAXED) + 1, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&fm_bucket);
    return 0;
}
#endif
