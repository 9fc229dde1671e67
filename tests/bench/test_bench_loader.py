"""``ringcast bench --vllm-loader``: a file or module that provides a MessageQueue class; new payloads
and the memcpy baseline. The loader here is a tiny fake that re-exports ringcast's own class, so
nothing needs the network or vLLM."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

import ringcast
from ringcast_lab.bench import transports
from ringcast_lab.bench.cases import all_cases, make_payload
from ringcast_lab.bench.runner import _memcpy_batch
from ringcast_lab.bench.transports import BenchLoaderError, load_message_queue_class
from ringcast_lab.cli import main


@pytest.fixture(autouse=True)
def _fresh_loader_cache(monkeypatch):
    monkeypatch.setattr(transports, "_loaded", {})


def _fake_loader(tmp_path: Path, name: str = "fake_vllm_loader", via_function: bool = False) -> Path:
    f = tmp_path / f"{name}.py"
    if via_function:
        f.write_text(
            "import types\n"
            "from ringcast import MessageQueue as _MQ\n"
            "def load_vllm_shm_broadcast():\n"
            "    return types.SimpleNamespace(MessageQueue=_MQ)\n"
        )
    else:
        f.write_text("from ringcast import MessageQueue\n")
    return f


@pytest.mark.parametrize("via_function", [False, True], ids=["MessageQueue", "load_vllm_shm_broadcast"])
def test_loader_file_provides_message_queue(tmp_path, via_function, monkeypatch):
    name = f"fake_loader_{int(via_function)}"
    monkeypatch.delitem(sys.modules, name, raising=False)
    f = _fake_loader(tmp_path, name, via_function)
    assert load_message_queue_class(str(f)) is ringcast.MessageQueue
    assert sys.modules[name].__file__ == str(f)  # registered under its name: pickles can find it
    assert load_message_queue_class(str(f)) is ringcast.MessageQueue  # cached, loaded once


def test_loader_module_name(monkeypatch):
    assert load_message_queue_class("ringcast") is ringcast.MessageQueue


@pytest.mark.parametrize(
    "spec, match",
    [
        ("/nonexistent/dir/loader.py", "no such file"),
        ("no_such_module_for_ringcast_bench", "failed to load: ModuleNotFoundError"),
        ("json", "has no MessageQueue class"),
    ],
)
def test_bad_loader_is_a_clear_error(spec, match):
    with pytest.raises(BenchLoaderError, match=match) as e:
        load_message_queue_class(spec)
    assert "--vllm-loader" in str(e.value) and isinstance(e.value, ringcast.RingcastError)


def test_loader_that_raises_is_reported(tmp_path, monkeypatch):
    monkeypatch.delitem(sys.modules, "raising_loader", raising=False)
    f = tmp_path / "raising_loader.py"
    f.write_text("raise RuntimeError('torch missing here')\n")
    with pytest.raises(BenchLoaderError, match="RuntimeError: torch missing here"):
        load_message_queue_class(str(f))
    assert "raising_loader" not in sys.modules


def test_cli_lists_vllm_with_a_loader_and_rejects_a_bad_one(tmp_path, capsys, monkeypatch):
    monkeypatch.delitem(sys.modules, "fake_vllm_loader", raising=False)
    f = _fake_loader(tmp_path)
    assert main(["bench", "--list", "--quick", "--vllm-loader", str(f)]) == 0
    out = capsys.readouterr().out
    assert "vllm" in out and "memcpy" in out and "hot/dict1m/1r" in out
    assert main(["bench", "--list", "--vllm-loader", str(tmp_path / "missing.py")]) == 2
    err = capsys.readouterr().err
    assert "--vllm-loader" in err and "missing.py" in err and "no such file" in err


@pytest.mark.timeout(120)
def test_bench_runs_the_loaded_class_beside_ringcast(tmp_path, capsys, monkeypatch):
    """Readers are spawned: they load the loader themselves before they unpickle the handle."""
    monkeypatch.delitem(sys.modules, "fake_vllm_loader", raising=False)
    f = _fake_loader(tmp_path)
    out_dir = tmp_path / "out"
    argv = ["bench", "--quick", "--rounds", "1", "--impl", "vllm", "--case", "hot/sched256/1r", "--out", str(out_dir)]
    rc = main([*argv, "--no-plots", "--no-progress", "--vllm-loader", str(f)])
    out = capsys.readouterr().out
    assert rc == 0, out
    result = json.loads((out_dir / "bench.json").read_text())
    impls = result["cases"]["hot/sched256/1r"]["impls"]
    assert {"ringcast", "vllm", "pickle", "memcpy"} <= set(impls)
    assert impls["vllm"]["p50_us"] > 0 and impls["ringcast"]["enqueue_p50_us"] > 0
    assert result["vllm_loader"] == str(f) and not result["errors"]


def test_new_payloads_and_cases():
    d = make_payload("dict1m")
    assert isinstance(d, dict) and len(d["blob"]) == 1 << 20
    names = {c.name for c in all_cases(quick=True)}
    assert {"hot/dict1m/1r", "hot/dict1m/3r", "idle/dict1m/3r", "flood/dict1m/1r"} <= names
    assert {"hot/sched256/1r", "hot/blob64k/3r", "flood/sched256/3r", "silent/3r"} <= names  # kept
    assert not any(n.startswith(("idle/tensor64m", "flood/tensor64m")) for n in names)  # hot only
    pytest.importorskip("torch")
    assert "hot/tensor64m/3r" in names
    t = make_payload("tensor64m")
    assert t.numel() * t.element_size() == 64 << 20


def test_memcpy_baseline_copies_the_pickled_message():
    case = next(c for c in all_cases(quick=True) if c.name == "hot/blob64k/1r")
    st = _memcpy_batch(case, make_payload("blob64k"))
    assert 0 < st["p50_us"] <= st["p99_us"]


def test_payloads_larger_than_a_transports_capacity_are_skipped():
    """The floor's slots hold 2 MiB: a case above it is skipped, not an error that drops the
    floor for every later case (it used to: 'mmap slice assignment is wrong size')."""
    from ringcast_lab.bench import runner
    from ringcast_lab.bench.transports import make_writer

    class G:
        writer = make_writer("floor", None, None)

    sizes: dict = {}
    big = next(c for c in all_cases(quick=True) if c.payload == "dict1m")
    assert runner._fits(G, big, make_payload("dict1m"), sizes)
    over = type(big)("blob5m", 1, "hot", 1)
    assert not runner._fits(G, over, b"x" * (5 << 20), sizes) and sizes["blob5m"] > 5 << 20
    assert runner._fits(type("H", (), {"writer": make_writer("pipe", None, None)}), over, b"x" * (5 << 20), sizes)


def _state(pid: int) -> str:
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0]


def test_groups_not_being_measured_are_stopped():
    """The runner stops (SIGSTOP) the readers of every transport it is not measuring, so idle
    spinning readers (vLLM's use a core each) cannot take the CPU from the one it measures; a
    stopped group measures again once continued, and closes cleanly from either state."""
    import multiprocessing as mp

    from ringcast_lab.bench import runner

    ctx = mp.get_context("spawn")
    a, b = runner._Group("pipe", 1, ctx), runner._Group("ringcast", 1, ctx)
    try:
        case = next(c for c in all_cases(quick=True) if c.name == "hot/sched256/1r")
        runner._run_only({"pipe": a, "ringcast": b}, a)
        assert _state(b.procs[0].pid) == "T" and _state(a.procs[0].pid) != "T"
        assert a.batch(case, make_payload("sched256"))["p50_us"] > 0
        runner._run_only({"pipe": a, "ringcast": b}, b)
        assert _state(a.procs[0].pid) == "T" and _state(b.procs[0].pid) != "T"
        assert b.batch(case, make_payload("sched256"))["p50_us"] > 0
        runner._run_only({"pipe": a, "ringcast": b}, None)
        assert {_state(g.procs[0].pid) for g in (a, b)} == {"T"}
    finally:
        a.close()  # continues its readers first, then stops them
        b.close()
    assert not any(p.is_alive() for g in (a, b) for p in g.procs)


def test_each_payload_gets_one_untimed_lap_per_group_before_its_rounds():
    """The rounds measure the steady state: before a payload's first round every group sends a lap
    of it (more messages than a ring has chunks), once per payload; a group whose lap fails is
    dropped with an error, as in a round."""
    from ringcast_lab.bench.cases import Case
    from ringcast_lab.bench.runner import WARM_LAP, _warm_payload

    class Group:
        writer = None  # no capacity limit (runner._fits)

        def __init__(self, fail=False):
            self.laps, self.fail, self.closed = [], fail, False

        def pause(self, stopped):
            pass

        def batch(self, case, payload):
            if self.fail:
                raise OSError("boom")
            self.laps.append((case.payload, case.mode, case.count))

        def close(self):
            self.closed = True

    a, b, bad = Group(), Group(), Group(fail=True)
    groups, warmed, errors = {"a": a, "b": b, "bad": bad}, set(), []
    for case in (Case("dict1m", 1, "hot", 60), Case("dict1m", 1, "flood", 60), Case("sched256", 1, "idle", 200), Case("none", 1, "silent", 0, 1.0)):
        _warm_payload(groups, case, b"x", {}, warmed, errors)
    assert a.laps == b.laps == [("dict1m", "hot", WARM_LAP), ("sched256", "hot", WARM_LAP)] and WARM_LAP > 10
    assert set(groups) == {"a", "b"} and bad.closed and errors == ["bad dict1m warm-up lap: OSError: boom"]
