"""The stress suite's own checks: the integrity checker must catch every injected fault, and a
clean run must pass. Runs are tiny (a fraction of a second of traffic, one or two readers)."""

from __future__ import annotations

import pickle
import time
from pathlib import Path

import pytest

from ringcast.stress.checker import FAULT_KINDS, PayloadFactory, SequenceChecker, boundary_sizes, decode
from ringcast.stress.report import summary_table, write_outputs
from ringcast.stress.runner import run_scenario, run_suite
from ringcast.stress.scenario import Phase, Scenario, builtin_scenarios, load_scenario
from ringcast.stress.stats import LatencyHistogram

# -- the checker alone -------------------------------------------------------------------------


def _check(seqs, count=None, bad=()):
    c = SequenceChecker()
    for s in seqs:
        c.data(s, s not in bad)
    c.finish(len(set(seqs)) if count is None else count)
    return c


def test_checker_clean():
    c = _check(range(100))
    assert c.ok and c.received == 100 and c.violations == {}


@pytest.mark.parametrize(
    "seqs, count, bad, kind",
    [
        ([0, 1, 3, 4], 5, (), "loss"),
        ([0, 1, 2], 5, (), "loss"),
        ([0, 1, 1, 2], 3, (), "duplicate"),
        ([0, 2, 1, 3], 4, (), "reorder"),
        ([0, 1, 2], 3, (1,), "corrupt"),
        ([0, 1, 2, 3], 2, (), "extra"),
        ([0, 1 << 40], 2, (), "corrupt"),
    ],
)
def test_checker_classifies(seqs, count, bad, kind):
    c = _check(seqs, count, bad)
    assert not c.ok
    assert kind in c.violations, c.violations
    assert c.examples


def test_reorder_is_not_also_loss():
    c = _check([0, 2, 1, 3], 4)
    assert c.violations == {"reorder": 1}


@pytest.mark.parametrize("kind, sizes", [("bytes", [0, 7, 5000]), ("dict", [256]), ("numpy", [0, 100, 70000])])
def test_framing_round_trip_and_corruption(kind, sizes):
    f = PayloadFactory(kind, sizes)
    for seq in range(6):
        msg = f.make(seq, f.prepare(seq), 123 + seq)
        back = pickle.loads(pickle.dumps(msg, protocol=5))
        assert decode(back) == ("data", seq, 123 + seq, True)
        bad = pickle.loads(pickle.dumps(f.make(seq, f.prepare(seq), 5, corrupt=True), protocol=5))
        assert decode(bad)[3] is False
    assert decode({"ctl": "end", "count": 3}) == ("ctl", {"ctl": "end", "count": 3})
    with pytest.raises(ValueError):
        decode(b"junk")


@pytest.mark.parametrize("mcb", [4096, 65536, 1 << 20])
def test_boundary_sizes_straddle_the_inline_limit(mcb):
    sizes = boundary_sizes(mcb)
    lens = [len(pickle.dumps((bytes(20), bytes(n)), protocol=5)) for n in sizes]
    assert lens == [mcb - 3, mcb - 2, mcb - 1, mcb]


def test_histogram_percentiles_and_merge():
    a, b = LatencyHistogram(), LatencyHistogram()
    for v in range(1, 10001):
        (a if v % 2 else b).record(v * 1000)
    a.merge(b)
    assert a.n == 10000 and a.min == 1000 and a.max == 10_000_000
    assert a.percentile(50) == pytest.approx(5_000_000, rel=0.02)
    assert a.percentile(99) == pytest.approx(9_900_000, rel=0.02)
    assert LatencyHistogram.from_dict(a.to_dict()).percentile(99.9) == a.percentile(99.9)
    xs, ys = a.cdf()
    assert ys[-1] == 1.0 and xs == sorted(xs)
    assert LatencyHistogram().summary()["p50_us"] is None


# -- scenario files ----------------------------------------------------------------------------


def test_builtin_scenarios_load():
    paths = builtin_scenarios()
    names = {load_scenario(p).name for p in paths}
    assert {"soak", "slow_readers", "bursts", "payload_sizes", "many_readers", "local_remote", "idle_gaps"} <= names
    for p in paths:
        sc = load_scenario(p)
        assert sc.description and sc.stresses, p
        d, i = sc.plan(quick=True)
        assert d + i <= 3.0, f"{p}: quick plan too long for CI"


def test_many_readers_scenario_oversubscribes():
    import os

    sc = next(load_scenario(p) for p in builtin_scenarios() if load_scenario(p).name == "many_readers")
    assert sc.readers > (os.cpu_count() or 1) and sc.spin is None and sc.quick_idle > 0


def test_scenario_file_errors(tmp_path: Path):
    bad = tmp_path / "bad.py"
    bad.write_text("SCENARIO = dict(name='x', readerz=2)\n")
    with pytest.raises(ValueError, match="unknown scenario key"):
        load_scenario(bad)
    bad.write_text("X = 1\n")
    with pytest.raises(ValueError, match="must define SCENARIO"):
        load_scenario(bad)
    bad.write_text("SCENARIO = dict(phases=[dict(pattern='gap')])\n")
    with pytest.raises(ValueError, match="needs gap"):
        load_scenario(bad)
    good = tmp_path / "09_mine.py"
    good.write_text("SCENARIO = dict(readers=1, phases=[dict(sizes=64)])\n")
    sc = load_scenario(good)
    assert sc.name == "mine" and sc.phases[0].sizes == [64]


# -- whole runs with injected faults ------------------------------------------------------------


def _tiny(**kw) -> Scenario:
    base = dict(
        name="tiny",
        readers=1,
        max_chunk_bytes=4096,
        max_chunks=4,
        quick_duration=0.25,
        phases=[Phase(name="mixed", kind="bytes", sizes=[8, 300, 5000], pattern="flood")],
        timeout=20.0,
    )
    base.update(kw)
    return Scenario(**base)


@pytest.mark.timeout(60)
def test_clean_run_passes():
    r = run_scenario(_tiny(readers=2), quick=True)
    assert r["verdict"] == "PASS", (r["errors"], r["violations"])
    assert r["sent"]["messages"] > 10
    assert all(x["received"] == r["sent"]["messages"] for x in r["readers"])
    assert 0 < r["overflow_ratio"] < 1  # the 5000-byte payloads overflow 4 KiB chunks
    assert r["latency"]["samples"] == 2 * r["sent"]["messages"]
    assert r["writer_stats"]["messages"] >= r["sent"]["messages"]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("fault", FAULT_KINDS)
def test_injected_fault_fails(fault):
    expect = {"corrupt": "corrupt", "drop": "loss", "duplicate": "duplicate", "reorder": "reorder"}[fault]
    r = run_scenario(_tiny(), quick=True, fault=fault)
    assert r["verdict"] == "FAIL"
    assert not r["errors"], r["errors"]
    assert set(r["violations"]) == {expect}, r["violations"]
    assert r["violations"][expect] == 1
    assert any(expect in e for e in r["examples"])


@pytest.mark.timeout(60)
def test_fault_reaches_remote_reader_and_overflow_path():
    # The dropped message overflows (5000 B > 4 KiB chunk): its marker and socket payload are
    # both skipped, and both the local and the remote reader report the loss.
    sc = _tiny(readers=1, remote_readers=1, phases=[Phase(name="big", sizes=[5000], pattern="rate", rate=2000)])
    r = run_scenario(sc, quick=True, fault={"kind": "drop", "at": 3})
    assert r["verdict"] == "FAIL" and r["violations"] == {"loss": 2}, (r["violations"], r["errors"])


@pytest.mark.timeout(60)
def test_stuck_reader_is_stopped_at_the_deadline():
    # Reader 0 sleeps 30 s after its first message: the ring fills, the writer waits, the
    # watchdog fires at the deadline and the reader is terminated; no segment leaks (fixture).
    sc = _tiny(slow_readers={0: 30.0}, timeout=0.5, quick_duration=0.2)
    t0 = time.monotonic()
    r = run_scenario(sc, quick=True, spawn_allowance=2.0)
    assert r["verdict"] == "FAIL"
    assert any("deadline" in e or "timed out" in e for e in r["errors"]), r["errors"]
    assert any("terminated" in e for e in r["errors"]), r["errors"]
    assert time.monotonic() - t0 < 15


@pytest.mark.timeout(60)
def test_suite_outputs(tmp_path: Path):
    sc = _tiny(idle=0.0, quick_idle=0.2, phases=[Phase(name="gap", kind="dict", sizes=[256], pattern="gap", gap=0.001)])
    suite = run_suite([sc], quick=True)
    assert suite["verdict"] == "PASS"
    r = suite["scenarios"][0]
    assert r["cpu"]["reader_idle_max"] is not None
    paths = write_outputs(suite, tmp_path, plots=False)
    assert paths["json"].exists() and paths["markdown"].exists()
    assert "PASS" in paths["markdown"].read_text()
    text = summary_table(suite)
    assert "VERDICT: PASS" in text and "tiny" in text


# -- the fences scenario (litmus tests; ringcast.stress.fences, tests/test_litmus.py) -----------

def _fences(**kw) -> Scenario:
    base = dict(name="fences", kind="fences", description="d", stresses="s", iterations=20_000, quick_iterations=20_000,
                duration=1.0, quick_duration=1.0, timeout=20.0)
    base.update(kw)
    return Scenario(**base)


def _needs_two_cpus():
    import os

    if len(os.sched_getaffinity(0)) < 2:
        pytest.skip("fewer than 2 CPUs available: the fences scenario reports NOT RUN here (tested below)")


def test_fences_scenario_is_builtin_and_first():
    scs = [load_scenario(p) for p in builtin_scenarios()]
    assert scs[0].name == "fences" and scs[0].kind == "fences"
    assert scs[0].iterations >= 1_000_000


@pytest.mark.timeout(120)
def test_fences_scenario_reports_a_table(tmp_path: Path):
    import json

    _needs_two_cpus()
    suite = run_suite([_fences()], quick=True)
    r = suite["scenarios"][0]
    assert r["verdict"] == "PASS" and suite["verdict"] == "PASS", (r["errors"], r["examples"])
    assert [(x["shape"], x["fence"]) for x in r["rows"]] == [
        ("eventcount", "F6N"), ("eventcount", "F6W"), ("mp", "F3"), ("mp", "F4"),
        ("mp_readflag", "F7"), ("mp_readflag", "F4"), ("rtr", "F5"), ("rtr", "F1")]
    for row in r["rows"]:
        assert row["shipped_iterations"] == row["control_iterations"] == 20_000 and row["shipped_forbidden"] == 0, row
    assert r["hunt"]["shipped"]["lost"] == 0 and r["hunt"]["control"]["iterations"] > 0
    m = r["machine"]
    assert m["cpu_model"] and m["arch"] and m["online_cores"] >= 2 and m["kernel"]
    assert m["extension"]["compiler"] and m["extension"]["fence"] and m["extension"]["dropped"] == ""
    # every control that showed nothing is said to be unexercised, and no other one
    quiet = {f"{x['shape']} control of {x['fence']}" for x in r["rows"] if x["control_forbidden"] == 0}
    assert {n.split(":")[0] for n in r["notes"] if "control of F" in n and "futex" not in n} == quiet
    paths = write_outputs(suite, tmp_path, plots=False)
    saved = json.loads(paths["json"].read_text())["scenarios"][0]
    assert saved["rows"] == r["rows"] and saved["machine"]["cpu_model"] == m["cpu_model"]
    assert "| eventcount | F6N |" in paths["markdown"].read_text()
    text = summary_table(suite)
    assert "fences: PASS" in text and "futex hunt" in text and "VERDICT: PASS" in text


def test_fences_without_the_extension_says_why(monkeypatch):
    import sys

    monkeypatch.setitem(sys.modules, "ringcast._litmus", None)  # import fails as without a compiler
    suite = run_suite([_fences()], quick=True)
    r = suite["scenarios"][0]
    assert r["verdict"] == "NOT RUN" and "ringcast._litmus is not built" in r["reason"], r["reason"]
    assert r["machine"]["extension"] is None
    text = summary_table(suite)
    assert "fences: NOT RUN - the C extension ringcast._litmus is not built" in text
    assert "fences NOT RUN" in text.splitlines()[-1] or any("VERDICT" in x and "NOT RUN" in x for x in text.splitlines())


@pytest.mark.timeout(120)
def test_fences_on_one_cpu_cannot_race(tmp_path: Path):
    import os
    import subprocess
    import sys

    cpu = sorted(os.sched_getaffinity(0))[0]
    p = subprocess.run(
        [sys.executable, "-m", "ringcast.cli", "stress", "--only", "fences", "--quick", "--no-plots", "--no-progress",
         "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=100, preexec_fn=lambda: os.sched_setaffinity(0, {cpu}),
    )
    assert p.returncode == 0, p.stdout + p.stderr
    assert "fences: NOT RUN - only 1 CPU is available" in p.stdout and "cannot race" in p.stdout, p.stdout


def _group_members(pgid: int) -> list[str]:
    """Live (non-zombie) processes of a process group, and any process mapping the hunt's memfd."""
    found = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] != "Z" and int(fields[2]) == pgid:
                found.append(f"pid {d.name} in group {pgid}")
            if "ringcast-litmus-hunt" in (d / "maps").read_text():
                found.append(f"pid {d.name} maps the hunt's memfd")
        except (OSError, ValueError):
            continue
    return found


@pytest.mark.timeout(120)
def test_hung_litmus_child_is_killed_at_the_deadline():
    """The child is stopped (SIGSTOP to its group) while its futex hunt runs: the scenario kills
    it at the deadline, reports an error, and leaves no process and no memfd behind."""
    import os
    import signal
    import threading

    from ringcast.stress.fences import run_fences

    _needs_two_cpus()
    sc = _fences(iterations=10**10, quick_iterations=10**10, quick_duration=1.0, timeout=1.0)
    out: list = []
    t = threading.Thread(target=lambda: out.append(run_fences(sc, quick=True)))
    t0 = time.monotonic()
    t.start()
    me, child, stopped = os.getpid(), None, False
    while t.is_alive() and not stopped:
        for d in Path("/proc").iterdir():
            if d.name.isdigit():
                try:
                    stat = (d / "stat").read_text()
                except OSError:
                    continue
                fields = stat[stat.rindex(")") + 2:].split()
                if int(fields[1]) == me and "litmus_child" in (d / "cmdline").read_text():
                    child = int(d.name)
                elif child is not None and int(fields[1]) == child:  # the hunt's forked waiter
                    os.killpg(child, signal.SIGSTOP)
                    stopped = True
                    break
        time.sleep(0.002)
    t.join(60)
    assert stopped, "did not catch the futex hunt running"
    r = out[0]
    assert r["verdict"] == "FAIL"
    assert any("still running at the scenario's deadline" in e and f"pid {child}" in e for e in r["errors"]), r["errors"]
    assert time.monotonic() - t0 < 30
    assert _group_members(child) == []


@pytest.mark.timeout(120)
def test_a_fences_run_cut_short_by_its_time_is_incomplete_not_a_fail():
    """Far more iterations than the planned time allows (what a busy machine looks like to the
    scenario): the child stops at its stop time, so jobs are cut short or never start. That is
    load, not a fence: the verdict stays PASS, its reason says 'incomplete' and names what did not
    finish (before: an error, so `ringcast stress --quick` FAILed under the test suite's load)."""
    from ringcast.stress.fences import run_fences

    _needs_two_cpus()
    r = run_fences(_fences(iterations=10**10, quick_iterations=10**10, quick_duration=0.5, timeout=30.0), quick=True)
    assert r["verdict"] == "PASS" and not r["errors"] and not r["violations"], (r["errors"], r["violations"])
    assert r["incomplete"] and r["reason"].startswith("incomplete: "), r["reason"]
    assert any("ran out of time" in m for m in r["incomplete"]), r["incomplete"]
