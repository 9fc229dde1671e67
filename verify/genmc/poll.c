/* poll.c: the descriptor wait (core/rc_poll.c) over the shipped core: the writer publishes M
 * messages with rc_writer_publish (its waits park on the futex model: PARK, no pre-look), and each
 * reader waits as an event loop does (events.py's _sync and the loop's sleep): drain its
 * descriptor, one round rc_reader_poll(arm = 1, check = 0): the look, PollArm (flag, count,
 * F6W), PollRecheck [PollDisarm]; not ready: sleep until the descriptor moves (the writer's
 * NotifySignal, io->signal: harness.h's h_signal; no timeout, so a lost wake-up is a reader
 * blocked forever, which --check-liveness reports); ready: rc_reader_receive, which then finds the
 * message at its first look. harness.h checks what every reader delivered. Switches as ring.c's
 * (N_CHUNKS, N_READERS, M, the core's fence switches). */
#define PARK 1
#define H_READER_FN h_poll_reader
static void *h_poll_reader(void *arg);
#include "harness.h"

static uint32_t h_wakes[N_READERS]; /* the wake-ups of each reader (a plain counter) */

static void *
h_poll_reader(void *arg)
{
    int r = (int)(intptr_t)arg;
    h_ctx *c = &h_reader_ctx[r];
    while (c->n_got == 0 || c->got[c->n_got - 1] != M) {
        for (;;) {
            uint32_t drained = h_drain(r); /* the round drains its descriptor before it arms */
            int ready = 0;
            int rc = rc_reader_poll(&h_rd[r], 1, 0, &ready);
            assert(rc == RC_OK);
            if (ready)
                break;
            h_sleep_on_descriptor(r, drained);
            h_wakes[r]++; /* a side effect after the sleep: without it GenMC 0.10.3 takes the sleep
                             loop's exit, which is this loop's back edge, for an iteration of a
                             side-effect-free spin loop and reports a woken reader as blocked */
        }
        int marker = 0, rc = rc_reader_receive(&h_rd[r], RC_NO_TIMEOUT, &marker);
        assert(rc == RC_OK && !marker);
        assert(c->n_got < M);
        c->got[c->n_got++] = c->pending[0];
    }
    return NULL;
}

int
main(void)
{
    h_run();
    return 0;
}
