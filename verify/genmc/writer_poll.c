/* writer_poll.c: the writer's descriptor wait (core/rc_poll.c, rc_writer_poll; spec/Ring.tla with
 * WriterPolls) over the shipped core: harness.h's writer, whose wait before each publish
 * (h_await_writer, H_WRITER_POLLS) is the event loop's: drain its descriptor, one round
 * rc_writer_poll(arm = 1, check = 0): the look, PollArm (count, flag, F6W), PollRecheck
 * [PollDisarm]; not ready: sleep until the descriptor moves (a reader's notify after its ack
 * loads writer_pollers after F6N and signals the writer: io->signal, harness.h's h_signal; no
 * timeout, so a lost wake-up is a writer blocked forever, which --check-liveness reports); ready:
 * rc_writer_publish, whose claim then finds the chunk free at its first look. The readers
 * receive as ring.c's do, a look before each receive (no PARK: with parking readers M = 2 took
 * 90 s under RC11 and more than 300 s under IMM), the look a spin loop (H_WRITER_POLLS: an
 * assume that failed would leave the sleeping writer to GenMC's liveness check as blocked
 * forever, a false verdict; harness.h's h_await_reader). harness.h checks what every reader
 * delivered. Switches as ring.c's (N_CHUNKS, N_READERS, M, the core's fence switches); with
 * N_CHUNKS = 1 and M = 2 the writer must wait for the ack of message 1. */
#define H_WRITER_POLLS 1
#include "harness.h"

int
main(void)
{
    h_run();
    return 0;
}
