"""The spec model the harness and the trace replay check the code against (ringcast.trace.model)."""

from __future__ import annotations

import pytest

from ringcast.trace.model import Conformance, RingModel


def test_a_finished_process_that_steps_again_is_named_finished():
    """expected() says ("done",) for a finished process; step() compared it with "done" and so
    never said so (the generic 'the spec allows ...' came instead)."""
    m = RingModel(2, 1, 0)  # no message to write: the writer is done from the start
    assert m.expected(m.Wr) == ("done",)
    with pytest.raises(Conformance, match=r"process W is finished in the spec but executed WriterClaim"):
        m.step(m.Wr, "WriterClaim", 0)
