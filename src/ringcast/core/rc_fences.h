/* rc_fences.h: every fence and atomic primitive of ringcast, in one place.
 *
 * Included by src/ringcast/core/rc_core.c (the protocol core: the ring's and the eventcount's steps
 * and each side's sequence; built through src/ringcast/binding/_protocol.c), src/ringcast/binding/_atomics.c
 * (ringcast.atomics: the tensor arena's fence, load_u32) and by src/ringcast_lab/litmus/_litmus.c (the litmus tests of `ringcast stress`, docs/stress.md), so the litmus
 * tests exercise the very instructions the ring runs: there is no second copy of a fence.
 *
 * - rc_fence(): a sequentially consistent thread fence. x86-64: GCC >= 11 emits
 *   `lock orq $0,(%rsp)` (a locked RMW on the stack, a full barrier cheaper than mfence; older
 *   compilers emit mfence); AArch64: `dmb ish`. The ring's fence points F1, F3, F4, F5, F7, F8
 *   (docs/protocol.md "Fences") and the arena's (ringcast.atomics.fence()) are this.
 * - rc_fence_load_u32(): F6N + NotifyLoadWaiters, a full fence then an atomic load.
 * - rc_fetch_add_u32(): F6W (ParkAnnounce) and every other eventcount RMW: the seq_cst RMW, then
 *   a full fence. A seq_cst RMW alone does not order a later relaxed load in C11, nor on AArch64
 *   in its LL/SC form (ldaxr/stlxr: the load may be satisfied before the increment is visible,
 *   which loses a wake-up; spec: park_relaxed_code_no_f6w; herd7's aarch64.cat: Sometimes). With
 *   the LSE form (ldaddal) aarch64.cat forbids the lost wake-up (Never; spec/litmus/AArch64,
 *   stress/arch_model.py VERDICTS), but which form runs is the compiler's and the CPU's choice
 *   (outline atomics pick at run time). On x86 the locked RMW already is a full fence.
 * - rc_futex_wait() / rc_futex_wake(): the process-shared futex (no FUTEX_PRIVATE_FLAG).
 *
 * rc_compiler_barrier() and rc_rmw_add_u32() are not fences: the litmus tests' controls put them
 * where a fence would be, to show that the harness can see the reordering the fence stops.
 *
 * Test-only switches, one per fence point implemented here (tests/proofs/test_litmus.py compiles a
 * throwaway build with one of them; setup.py never passes them, and the litmus module reports
 * any that is set, which `ringcast stress` treats as an error):
 *   -DRINGCAST_TEST_DROP_F6N   rc_fence_load_u32 loses its fence
 *   -DRINGCAST_TEST_DROP_F6W   rc_fetch_add_u32 loses its trailing fence
 * (F1, F3, F4, F5, F7, F8 are call sites of rc_fence(); their switches live in core/rc_steps.c and,
 * for the litmus shapes, in _litmus.c.)
 */
#ifndef RINGCAST_FENCES_H
#define RINGCAST_FENCES_H

#include <stdint.h>
#include <errno.h>
#include <time.h>
#ifdef __linux__
#include <linux/futex.h>
#include <sys/syscall.h>
#include <unistd.h>
#endif

#define RC_INLINE static inline __attribute__((always_inline))

/* Orders nothing in hardware; only stops the compiler from moving memory accesses across it. */
RC_INLINE void
rc_compiler_barrier(void)
{
    __asm__ __volatile__("" ::: "memory");
}

/* The full fence (F1, F3, F4, F5, F7, F8; and the fence of F6N and F6W below). */
RC_INLINE void
rc_fence(void)
{
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
}

RC_INLINE uint32_t
rc_load_u32(uint32_t *p)
{
    return __atomic_load_n(p, __ATOMIC_SEQ_CST);
}

/* The spin phase's hint to the CPU that it spins (x86: pause, AArch64: yield): the sibling
 * hyperthread gets the core's resources, and the loop does not flood the memory system. Not a
 * fence: it orders nothing. */
RC_INLINE void
rc_spin_hint(void)
{
#if defined(RINGCAST_TEST_NO_SPIN_HINT)
    rc_compiler_barrier();
#elif defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__) || defined(__arm__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    rc_compiler_barrier();
#endif
}

/* A 32-bit word stored with seq_cst order (the core's cancel request, set from any thread) */
RC_INLINE void
rc_store_u32(uint32_t *p, uint32_t v)
{
    __atomic_store_n(p, v, __ATOMIC_SEQ_CST);
}

/* The ring's flag bytes (written, read_r) and the evicted byte: single-copy atomic, no ordering
 * of their own (relaxed). What orders them is the fences at the protocol's fence points, as in the
 * spec's relaxed model: plain loads and stores, ordered only by F1-F7. */
RC_INLINE uint8_t
rc_load_u8(const uint8_t *p)
{
    return __atomic_load_n(p, __ATOMIC_RELAXED);
}

RC_INLINE void
rc_store_u8(uint8_t *p, uint8_t v)
{
    __atomic_store_n(p, v, __ATOMIC_RELAXED);
}

/* F6N + NotifyLoadWaiters: the publishing store must be visible before `waiters` is read
 * (store->load order, which x86 does not give without a fence either; spec: park_tso_no_f6n). */
RC_INLINE uint32_t
rc_fence_load_u32(uint32_t *p)
{
#ifdef RINGCAST_TEST_DROP_F6N
    rc_compiler_barrier();
#else
    rc_fence();
#endif
    return rc_load_u32(p);
}

/* The seq_cst read-modify-write alone: NOT a full fence in C11 nor on AArch64 LL/SC (see the top). */
RC_INLINE uint32_t
rc_rmw_add_u32(uint32_t *p, uint32_t delta)
{
    return __atomic_fetch_add(p, delta, __ATOMIC_SEQ_CST);
}

/* F6W (ParkAnnounce): the RMW, then a full fence, so ParkRecheck's loads come after it. */
RC_INLINE uint32_t
rc_fetch_add_u32(uint32_t *p, uint32_t delta)
{
    uint32_t old = rc_rmw_add_u32(p, delta);
#ifdef RINGCAST_TEST_DROP_F6W
    rc_compiler_barrier();
#else
    rc_fence();
#endif
    return old;
}

/* F6W alone (PollArm: after the poll flag's exchange and the count's RMW) */
RC_INLINE void
rc_fence_f6w(void)
{
#ifdef RINGCAST_TEST_DROP_F6W
    rc_compiler_barrier();
#else
    rc_fence();
#endif
}

/* A poll flag's seq_cst exchange (rc_poll.c): its old value says who flipped it */
RC_INLINE uint32_t
rc_exchange_u32(uint32_t *p, uint32_t v)
{
    return __atomic_exchange_n(p, v, __ATOMIC_SEQ_CST);
}

/* The test-only switches this translation unit was built with ("" in a shipped build). */
#if defined(RINGCAST_TEST_DROP_F6N) && defined(RINGCAST_TEST_DROP_F6W)
#define RC_DROPPED_IN_HEADER "F6N F6W "
#elif defined(RINGCAST_TEST_DROP_F6N)
#define RC_DROPPED_IN_HEADER "F6N "
#elif defined(RINGCAST_TEST_DROP_F6W)
#define RC_DROPPED_IN_HEADER "F6W "
#else
#define RC_DROPPED_IN_HEADER ""
#endif

#ifdef __linux__
/* Sleep while *p == expected, at most *ts: 0 woken, 1 value differed, 2 timed out, 3 interrupted,
 * -1 other error (errno set). Process-shared: the waiters live in other processes. */
RC_INLINE int
rc_futex_wait(uint32_t *p, uint32_t expected, const struct timespec *ts)
{
    long rc = syscall(SYS_futex, p, FUTEX_WAIT, expected, ts, NULL, 0);
    if (rc == 0)
        return 0;
    if (errno == EAGAIN)
        return 1;
    if (errno == ETIMEDOUT)
        return 2;
    if (errno == EINTR)
        return 3;
    return -1;
}

/* Wake up to n sleepers on p; the number woken, or -1 (errno set). */
RC_INLINE long
rc_futex_wake(uint32_t *p, int n)
{
    return syscall(SYS_futex, p, FUTEX_WAKE, n, NULL, NULL, 0);
}
#endif

#endif /* RINGCAST_FENCES_H */
