"""The MessageQueue-level trace recorder of ``ringcast stress --record-trace``
(ringcast_lab.trace.serial, level "queue"): a serialised run of real MessageQueue processes (parking at once,
an overflowing message) is a behaviour of spec/Ring.tla for TLC (spec/trace/TraceQueue.tla), and
the same trace with one step dropped is not (the check is not vacuous)."""
from __future__ import annotations

import pytest

from ringcast_lab.trace.serial import OBJECTS, big_of, record_queue_run
from ringcast_lab.trace.tracecheck import validate

pytestmark = pytest.mark.timeout(300)


@pytest.fixture(scope="module")
def recorded() -> dict:
    return record_queue_run(seed=3, timeout=60)


def test_a_recorded_run_has_the_code_steps(recorded):
    steps = recorded["steps"]
    actions = [a for a, _ in steps]
    assert (recorded["N"], recorded["NR"], recorded["M"]) == (2, 2, len(OBJECTS))
    assert recorded["Big"] == [2]  # only message 2 overflows the 64-byte chunks
    assert actions.count("WriterPublish") == 3 and actions.count("WriterSendOverflow") == 1
    assert sorted(p for a, p in steps if a == "ReaderRecvOverflow") == [0, 1]
    assert sorted(p for a, p in steps if a == "ReaderAck") == [0, 0, 0, 1, 1, 1]
    # every futex sleep the trace shows ended after a wake (ParkSleep is the wake-up)
    for k, (a, _p) in enumerate(steps):
        if a == "ParkSleep":
            assert "NotifyWake" in actions[:k]


def test_big_is_read_off_the_writer_steps():
    steps = [("WriterPublish", 2), ("WriterSendOverflow", 2), ("WriterPublish", 2), ("WriterPublish", 2),
             ("WriterSendOverflow", 2), ("WriterPublish", 2)]
    assert big_of(steps) == [2, 4]


def test_the_recorded_run_is_a_spec_behaviour(recorded, tlc, tmp_path):
    res = validate([recorded], "queue", keep=str(tmp_path))[0]
    assert res.ok, res.summary() + "\n" + " ".join(recorded["schedule"]) + "\n" + res.output[-3000:]
    assert "a behaviour of the spec" in res.summary()


@pytest.mark.parametrize("action", ["WriterPublish", "NotifyLoadWaiters", "ReaderRecvOverflow", "ReaderAck"])
def test_a_trace_with_one_step_dropped_is_rejected(recorded, tlc, tmp_path, action):
    steps = list(recorded["steps"])
    k = next(k for k, (a, _) in enumerate(steps) if a == action)
    bad = dict(recorded, steps=steps[:k] + steps[k + 1:])
    res = validate([bad], "queue", keep=str(tmp_path))[0]
    assert not res.ok and "No error has been found" in res.output, res.output[-3000:]
    assert "no behaviour of the spec matches the whole trace" in res.summary()


def test_queue_trace_runs_must_be_positive(tmp_path, capsys):
    from ringcast_lab.cli import main

    rc = main(["stress", "--quick", "--out", str(tmp_path / "out"), "--record-trace", str(tmp_path / "t.json"),
               "--queue-trace-runs", "0"])
    assert rc == 2 and "--queue-trace-runs must be >= 1" in capsys.readouterr().err
