"""Spec-state coverage (ringcast_lab.trace.coverage) and the guided replay (guided.py): TLC's state
graph of ring_correct read back under the spec's names, every state and transition forced on the
real processes, and a planted bug in a rarely reached state caught by it."""

from __future__ import annotations

import time

import pytest

from ringcast_lab.trace import coverage as c

from .guided import guided, harness_constants, ring_coverage

pytestmark = pytest.mark.timeout(300)

DOT = r'''strict digraph DiskGraph {
1 [label="/\\ pc = (0 :> \"load_w\" @@ 1 :> \"claim\")\n/\\ wr = 0\n/\\ waiters = [W |-> 0, R |-> 0]\n/\\ sb = (0 :> <<>> @@ 1 :> <<>>)",style = filled]
1 -> 2 [label="WriterStep",color="black",fontcolor="black"];
2 [label="/\\ pc = (0 :> \"load_w\" @@ 1 :> \"clear_written\")\n/\\ wr = 0\n/\\ waiters = [W |-> 0, R |-> 0]\n/\\ sb = (0 :> <<>> @@ 1 :> <<1, -2>>)"]
2 -> 2 [label="Finished",color="black",fontcolor="black"];
}'''


def test_tlc_values_and_dot_are_read_under_the_spec_names():
    assert c.parse_value('(0 :> <<1, -2>> @@ 1 :> {})') == ((1, -2), frozenset())
    assert c.parse_value('[W |-> 0, R |-> TRUE]') == (("R", True), ("W", 0))
    assert c.parse_value('(2 :> "a\\"b")') == ((2, 'a"b'),)
    nodes, edges, init = c.read_dot(DOT)
    assert init == ["1"] and edges == [("1", "2"), ("2", "2")]
    assert nodes["2"]["pc"] == ("load_w", "clear_written") and nodes["2"]["sb"] == ((), (1, -2))
    g = c.build_graph("t", {}, nodes, edges, init, look_quotient=False)
    assert [(e[2], e[3]) for e in g.edges] == [(1, "WriterClaim")]  # the stutter is no transition


def test_a_graph_of_other_constants_is_refused_naming_the_constant():
    consts = {"N": "3", "NR": "2", "M": "3", "Order": "OrderCorrect", "TwoStepPayload": "FALSE"}  # a model's config
    with pytest.raises(c.ConstantMismatch, match=r"N = 3 \(the harness runs N = 2\).*TwoStepPayload = FALSE"):
        c.check_constants(consts, harness_constants(2, 2, 3))


@pytest.mark.usefixtures("tlc")
def test_guided_replay_reaches_every_state_and_transition_of_ring_correct(pool):
    """TLC's 1,541 states of ring_correct (1,005 after the look quotient, 2,609 transitions):
    every one reached by the real processes, each step checked against the spec (~5 s here)."""
    cov, (N, NR, M) = ring_coverage("ring_correct")
    assert cov.graph.constants["_distinct"] == 1541
    t0 = time.monotonic()
    res = guided(pool, cov, N=N, NR=NR, M=M)
    rep = c.report(cov)
    assert not res.findings, "\n".join(map(str, res.findings[:3]))
    assert not rep["strays"], rep["strays"][:3]
    assert rep["states"] == (len(cov.graph.states),) * 2 and rep["transitions"] == (len(cov.graph.edges),) * 2, \
        c.format_report(rep)
    print(c.format_report(rep, f"guided: {res.paths} paths, {time.monotonic() - t0:.1f}s"))


@pytest.mark.usefixtures("tlc")
def test_guided_replay_catches_a_reader_that_acks_early_only_when_the_writer_waits(pool):
    """variants.EarlyAckReader misbehaves in one class of states (the last reader's first
    message, the writer waiting to claim that chunk, the other reader done with it): the guided
    replay reaches them, and the driver reports the refused step with its path."""
    cov, (N, NR, M) = ring_coverage("ring_correct")
    res = guided(pool, cov, N=N, NR=NR, M=M, reader="early_ack")
    assert res.findings
    f = res.findings[0]
    assert "R1 is about to execute ReaderAck" in f.detail and "ReaderCopy" in f.detail, str(f)


@pytest.mark.usefixtures("tlc")
def test_guided_replay_catches_a_reader_that_takes_a_stale_look_for_a_lap(pool):
    """variants.LappedReader drops a message only after a stale look with a peer still behind it,
    a state plain Hypothesis exploration rarely enters (the ci budget at ring_correct's constants
    catches it under few of 20 seeds: ``python -m tests.stateful.guided ring_correct --planted
    lapped``, docs/stateful.md); the guided replay reaches it and the per-step check refuses the
    ack where the spec's reader copies."""
    cov, (N, NR, M) = ring_coverage("ring_correct")
    res = guided(pool, cov, N=N, NR=NR, M=M, reader="lapped", first=True)
    assert res.findings, f"{res.paths} paths replayed, no finding"
    f = res.findings[0]
    assert "is about to execute ReaderAck" in f.detail and "ReaderCopy" in f.detail, str(f)


@pytest.mark.usefixtures("tlc")
def test_guided_replay_enters_every_state_of_overflow_code():
    """The MessageQueue level: TLC's 2,349 states of overflow_code (1,613 after the look and
    inline-send quotients) entered by a real MessageQueue (two local readers, messages 1 and 3
    overflow, receives time out where the path says), each step checked as the queue harness
    checks it (~4 s: paths that enter every state; every transition: the command)."""
    from .guided_queue import GuidedPool, guided as guided_queue, queue_coverage

    cov = queue_coverage("overflow_code")
    assert cov.graph.constants["_distinct"] == 2349
    pool = GuidedPool(0)
    try:
        res = guided_queue(pool, cov, "overflow_code", only_states=True)
    finally:
        pool.close()
    rep = c.report(cov)
    assert not res.findings, "\n".join(map(str, res.findings[:3]))
    assert not rep["strays"], rep["strays"][:3]
    assert rep["states"] == (len(cov.graph.states),) * 2, c.format_report(rep)
    assert rep["actions"]["ReaderRecvOverflow"]["states"][0] > 0 and any(
        s[cov.graph.vars.index("pc")][r] == "owed" for s in (cov.graph.states[k] for k in cov.states) for r in (0, 1))


def test_parking_projection_reads_whether_the_reader_looks_again_or_parks(pool):
    """With parking, a reader's failed look (written = 0) leads in the spec to park_snap or back
    to load_w; the code decides at its next step (spin=0: it looks twice, then parks), so the
    projection reads the action the reader is blocked before (ringcast_lab.trace.coverage_queue, ParkCoverage)."""
    from ringcast_lab.trace.coverage_queue import QueueConsts, park_values

    from .guided_queue import PARK
    from .queue_run import QueueRun

    run = QueueRun(pool, n_local=1, n_remote=0, objs=["a"], max_chunk_bytes=64, max_chunks=1, **PARK)
    try:
        consts = QueueConsts({"Big": "{}", "Order": "OrderSendBeforeClear", "Parking": "TRUE"})
        r0, pcs = run.procs[0], []
        for _ in range(2):
            assert r0.pending[0] == "ReaderLoadWritten"
            run.step(r0)  # written = 0: not ready
            pcs.append(park_values(run.model, consts, {pr.p: pr.pending[0] for pr in run.procs})["pc"][0])
        assert pcs == ["load_w", "park_snap"] and r0.pending[0] == "ParkSnapshot"
    finally:
        run.close()
