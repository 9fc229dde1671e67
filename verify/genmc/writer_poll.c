/* writer_poll.c: the writer's descriptor wait (core/rc_poll.c, rc_writer_poll; spec/Ring.tla with
 * WriterPolls) over the shipped core: the writer waits for a free chunk as an event loop does
 * (events.py's _sync before enqueue_async's attempt, and the loop's sleep): drain its descriptor,
 * one round rc_writer_poll(arm = 1, check = 0): the look, PollArm (count, flag, F6W),
 * PollRecheck [PollDisarm]; not ready: sleep until the descriptor moves (a reader's notify after
 * its ack loads writer_pollers after F6N and signals the writer: io->signal, harness.h's
 * h_signal; no timeout, so a lost wake-up is a writer blocked forever, which --check-liveness
 * reports); ready: rc_writer_publish, whose claim then finds the chunk free at its first look.
 * The readers receive as ring.c's do, a look before each receive (no PARK: with parking readers
 * M = 2 took 90 s under RC11 and more than 300 s under IMM), the look a spin loop
 * (H_SPIN_PRELOOK: an assume that failed would leave the sleeping writer to GenMC's liveness
 * check as blocked forever, a false verdict; harness.h's h_await_reader). harness.h checks what
 * every reader delivered. Switches as ring.c's (N_CHUNKS, N_READERS, M, the core's fence
 * switches); with N_CHUNKS = 1 and M = 2 the writer must wait for the ack of message 1. */
#define H_SPIN_PRELOOK 1
#define H_WRITER_FN h_poll_writer
static void *h_poll_writer(void *arg);
#include "harness.h"

static uint32_t h_writer_wakes; /* the writer's wake-ups (a plain counter: see poll.c's h_wakes) */

static void *
h_poll_writer(void *arg)
{
    (void)arg;
    for (uint32_t k = 1; k <= M; k++) {
        uint32_t buf[PAYLOAD_WORDS];
        for (int j = 0; j < PAYLOAD_WORDS; j++)
            buf[j] = k;
        const void *bufs[1] = {buf};
        size_t lens[1] = {sizeof buf};
        rc_parts parts = {1, bufs, lens};
        h_msg = h_sending = k;
        for (;;) {
            uint32_t drained = h_drain(RC_WRITER); /* the round drains the descriptor before it arms */
            int ready = 0;
            int rc = rc_writer_poll(&h_w, 1, 0, &ready);
            assert(rc == RC_OK);
            if (ready)
                break;
            h_sleep_on_descriptor(RC_WRITER, drained);
            h_writer_wakes++;
        }
        int rc = rc_writer_publish(&h_w, &parts, 0, 0, RC_NO_TIMEOUT);
        assert(rc == RC_OK);
    }
    assert(rc_writer_finish(&h_w) == RC_OK);
    return NULL;
}

int
main(void)
{
    h_run();
    return 0;
}
