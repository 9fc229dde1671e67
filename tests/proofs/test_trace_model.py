"""The spec model the harness and the trace replay check the code against (ringcast_lab.trace.model)."""

from __future__ import annotations

import pytest

from ringcast_lab.trace.model import ORDER_CORRECT, ORDER_QUEUE, Conformance, RingModel


def test_a_finished_process_that_steps_again_is_named_finished():
    """expected() says ("done",) for a finished process; step() compared it with "done" and so
    never said so (the generic 'the spec allows ...' came instead)."""
    m = RingModel(2, 1, 0)  # no message to write: the writer is done from the start
    assert m.expected(m.Wr) == ("done",)
    with pytest.raises(Conformance, match=r"process W is finished in the spec but executed WriterClaim"):
        m.step(m.Wr, "WriterClaim", 0)


@pytest.mark.parametrize("parts", [1, 2])
def test_the_writer_takes_as_many_payload_steps_as_the_model_says(parts):
    """The queue's writer stores a message in one WriterWritePayload (one C step for every part),
    the ring-level harness's in two (TwoStepPayload): one step more is refused. The queue model
    took any number before (payload_parts=None), looser than TraceQueue.tla, which has one."""
    m = RingModel(2, 1, 1, order=ORDER_QUEUE if parts == 1 else ORDER_CORRECT, payload_parts=parts)
    for action in ("WriterClaim", "WriterClearWritten", *["WriterWritePayload"] * parts):
        m.step(m.Wr, action, 0)
    assert m.data[0] == 1  # the payload is whole
    with pytest.raises(Conformance, match="WriterWritePayload"):
        m.step(m.Wr, "WriterWritePayload", 0)
