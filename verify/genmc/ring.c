/* ring.c: a writer and N_READERS (2) readers over N_CHUNKS chunks, M (3) messages of
 * PAYLOAD_WORDS words, the core's rc_writer_publish / rc_reader_receive with the futex park
 * (harness.h has the models and the checks). Also the base of the other harnesses' switches:
 * -DOVERFLOW_MSG=k (message k is an overflow marker), -DABORT_MSG/ABORT_ACTION/ABORT_NTH (an
 * injected abort), -DDEAD_READER/DEAD_AFTER (eviction), and the core's fence switches. */
#include "harness.h"

int
main(void)
{
    h_run();
    return 0;
}
