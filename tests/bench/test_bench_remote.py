"""Remote readers in both benchmark harnesses (issue 42): ``ringcast bench``'s remote cases and
implementations (``remote``, ``remote-insecure``, ``vllm-remote``), the ratios that compare like
with like, and the second harness's flood and 3-reader remote rows. Benchmarks are not pass/fail
tests: nothing here looks at a time, only at what runs, what is reported and what is delivered.
A fake loader (ringcast's own class under vLLM's name) stands in for vLLM's, so nothing needs vLLM."""

from __future__ import annotations

import json
import re
import threading

import pytest

from ringcast_lab.bench import harness
from ringcast_lab.bench.cases import BASE, REMOTE_PAYLOADS, Case, all_cases, family_of
from ringcast_lab.bench.report import bench_markdown, bench_table
from ringcast_lab.bench.runner import summarize
from ringcast_lab.bench.transports import available, make_writer, open_reader, queue_shape
from ringcast_lab.cli import main

REMOTE = ("remote", "remote-aes", "remote-insecure", "vllm-remote")


def _loader(tmp_path, name):
    f = tmp_path / f"{name}.py"
    f.write_text("from ringcast import MessageQueue\n")
    return str(f)


@pytest.mark.parametrize("quick", [False, True])
def test_remote_cases_cover_every_size_mode_and_reader_count(quick):
    cases = all_cases(quick)
    remote = {(c.payload, c.mode, c.readers): c for c in cases if c.family == "remote"}
    assert set(remote) == {(p, m, n) for p in REMOTE_PAYLOADS for m in ("hot", "idle", "flood") for n in (1, 3)}
    assert set(REMOTE_PAYLOADS) == {"sched256", "blob64k", "dict1m", "blob16m"}
    c = remote[("blob16m", "flood", 3)]
    assert c.name == "flood/blob16m/3r/remote" and "3 remote reader(s)" in c.describe()
    # vLLM's remote PUB socket drops above its high-water mark (1,000 messages): floods stay under it
    assert all(c.count < 1000 for c in remote.values() if c.mode == "flood")
    assert all(c.count >= 4 for c in remote.values())
    local = {c.name: c for c in cases if c.family == "local"}
    assert "hot/sched256/1r" in local and "silent/3r" in local  # the local cases keep their names


def test_remote_implementations_and_their_queue_shapes(tmp_path):
    assert {family_of(i) for i in REMOTE} == {"remote"} and family_of("ringcast") == family_of("vllm") == "local"
    assert BASE == {"local": "ringcast", "remote": "remote"}
    impls = available(_loader(tmp_path, "fake_vllm_loader_r1"))
    assert set(REMOTE) <= set(impls) and "vllm" in impls
    assert queue_shape("remote", 3) == queue_shape("vllm-remote", 3) == {"n_local_reader": 0, "connect_ip": "127.0.0.1"}
    assert queue_shape("ringcast", 3) == {"n_local_reader": 3}
    assert queue_shape("overflow", 1) == {"n_local_reader": 1, "max_chunk_bytes": 1 << 20}


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", REMOTE)
def test_remote_transport_delivers_to_a_tcp_reader(tmp_path, name):
    """The writer half and the reader half of each remote implementation, in one process: the
    reader is remote (its queue has no local readers) and gets every message intact."""
    w = make_writer(name, None, _loader(tmp_path, f"fake_vllm_loader_{name.replace('-', '_')}"))
    msgs = [("d", 1, 0, {"a": 1}), ("d", 2, 0, b"x" * (64 << 10)), ("d", 3, 0, bytes(range(256)) * 4096)]
    assert _delivered(w, name, msgs, lambda: w.mq.n_local_reader == 0 and w.mq.n_remote_reader == 1) == msgs


def _delivered(w, name, msgs, check=lambda: True) -> list:
    """What a reader of writer ``w`` (implementation ``name``) in a thread of this process gets of ``msgs``."""
    got, errors = [], []
    try:
        info = w.prepare(1)
        assert check()

        def reader():
            try:
                recv, close = open_reader(name, w.reader_info(info, 0), 0)
                try:
                    got.extend(recv() for _ in msgs)
                finally:
                    close()
            except BaseException as e:  # reported below
                errors.append(e)

        t = threading.Thread(target=reader, daemon=True)
        t.start()
        w.connect()
        for m in msgs:
            w.send(m)
        t.join(60)
        assert not t.is_alive() and not errors, errors
        return got
    finally:
        w.close()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("name", ["zmq-remote", "zmq-remote-curve", "zmq-remote-aes"])
def test_each_remote_floor_delivers_to_a_tcp_reader(name):
    """The floors of issue 53 move the same messages: small, 64 KiB and a large out-of-band array
    (sealed and opened into kept buffers in ``zmq-remote-aes``)."""
    np = pytest.importorskip("numpy")
    msgs = [("d", 1, 0, {"a": 1}), ("d", 2, 0, b"x" * (64 << 10)), ("d", 3, 0, np.arange(300_000, dtype=np.uint8)), ("d", 4, 0, b"y" * (1 << 20))]
    got = _delivered(make_writer(name), name, msgs)
    assert [g[:2] for g in got] == [m[:2] for m in msgs] and got[0] == msgs[0] and got[1] == msgs[1] and got[3] == msgs[3]
    assert (got[2][3] == msgs[2][3]).all()


def _raw(p50, msgs=None):
    return [{"p50_us": p50, "p99_us": 2 * p50, **({"msgs_per_s": msgs} if msgs else {})}]


def test_ratios_compare_remote_with_remote_and_each_ringcast_mode_with_its_vllm_peer():
    hot_l, hot_r, flood_r = Case("sched256", 1, "hot", 10), Case("sched256", 1, "hot", 10, family="remote"), Case("dict1m", 3, "flood", 10, family="remote")
    raw = {hot_l.name: {"ringcast": _raw(10.0), "vllm": _raw(50.0)},
           hot_r.name: {"ringcast": _raw(1.0), "remote": _raw(200.0), "remote-insecure": _raw(90.0), "vllm-remote": _raw(100.0)},
           flood_r.name: {"remote": [{"msgs_per_s": 500.0}], "remote-insecure": [{"msgs_per_s": 2000.0}], "vllm-remote": [{"msgs_per_s": 1000.0}]}}
    s = summarize([hot_l, hot_r, flood_r], raw)
    local, remote, flood = (s[c.name]["impls"] for c in (hot_l, hot_r, flood_r))
    assert local["vllm"]["vs_ringcast"]["p50_us"] == 5.0 and local["ringcast"]["vs_vllm"]["p50_us"] == 0.2
    # remote rows: over ringcast's remote default, never over the local queue
    assert remote["vllm-remote"]["vs_ringcast"]["p50_us"] == 0.5 and remote["remote-insecure"]["vs_ringcast"]["p50_us"] == 0.45
    assert remote["remote"]["vs_vllm"]["p50_us"] == 2.0 and remote["remote-insecure"]["vs_vllm"]["p50_us"] == 0.9
    assert "vs_vllm" not in remote["vllm-remote"]
    # time per flooded message over vLLM's: half as long at twice the throughput
    assert flood["remote-insecure"]["vs_vllm"]["msgs_per_s"] == 0.5 and flood["remote"]["vs_vllm"]["msgs_per_s"] == 2.0
    assert s[flood_r.name]["case"]["family"] == "remote"
    result = {"cases": s, "goals": [], "errors": [], "rounds": 1, "quick": True, "wall_s": 0.0,
              "host": {"cores": 2, "platform": "x", "python": "3"}}
    md = bench_markdown(result, [], None).splitlines()
    head = next(line for line in md if line.startswith("| case"))
    rows = [re.split(r"(?<!\\)\|", line) for line in md if "/remote |" in line]
    assert all(len(r) == len(re.split(r"(?<!\\)\|", head)) for r in rows)  # the ratios' own "|" do not split cells
    cells = {(r[1].strip(), r[2].strip()): [x.strip().replace("\\|", "|") for x in r[3:-1]] for r in rows}
    assert cells[("hot/sched256/1r/remote", "remote")][-4:] == ["1", "2.00 | 2.00 | -", "-", "1"]
    assert cells[("hot/sched256/1r/remote", "vllm-remote")][-4:] == ["0.50 | 0.50 | -", "-", "-", "1"]
    assert cells[("flood/dict1m/3r/remote", "remote-insecure")][-4:-2] == ["- | - | 0.25", "- | - | 0.50"]
    assert "x vLLM's time" in bench_table(result)


@pytest.mark.timeout(240)
def test_bench_runs_remote_cases_with_only_the_remote_implementations(tmp_path):
    """Small and bounded: 1 round of the quick remote 256 B hot and flood cases, 1 reader."""
    out = tmp_path / "b"
    rc = main(["bench", "--quick", "--rounds", "1", "--no-plots", "--no-progress", "--impl", "remote-insecure", "--impl", "remote-aes", "--impl", "vllm-remote",
               "--vllm-loader", _loader(tmp_path, "fake_vllm_loader_r2"), "--case", "hot/sched256/1r/remote",
               "--case", "flood/sched256/1r/remote", "--out", str(out)])
    res = json.loads((out / "bench.json").read_text())
    assert rc == 0 and res["errors"] == []
    assert set(res["cases"]) == {"hot/sched256/1r/remote", "flood/sched256/1r/remote"}
    for c in res["cases"].values():
        assert set(c["impls"]) == set(REMOTE)  # no local queue, no in-process baseline
        assert all(c["impls"][i]["vs_vllm"] for i in ("remote", "remote-aes", "remote-insecure"))
    hot = res["cases"]["hot/sched256/1r/remote"]["impls"]
    assert all(hot[i]["p50_us"] > 0 and hot[i]["enqueue_faults_mean"] is not None for i in REMOTE)
    assert all(res["cases"]["flood/sched256/1r/remote"]["impls"][i]["msgs_per_s"] > 0 for i in REMOTE)


@pytest.mark.timeout(300)
def test_harness_remote_flood_with_three_readers(tmp_path):
    """The second harness's flood and 3-reader remote rows: every remote implementation delivers
    every message to 3 TCP readers, and each ringcast mode has its ratio over vLLM's."""
    out = tmp_path / "h.json"
    rc = harness.main(["--payload", "sched256", "--payload", "blob64k", "--readers", "3", "--mode", "flood", "--repeats", "1",
                       "--scale", "0.05", "--impl", "remote", "--impl", "remote-aes", "--impl", "remote-insecure", "--impl", "vllm-remote",
                       "--impl", "zmq-remote", "--vllm-loader", _loader(tmp_path, "fake_vllm_loader_r3"), "--out", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    assert set(res["summary"]) == {"sched256/3r/remote", "blob64k/3r/remote"} and res["mode"] == "flood"
    modes = ("remote", "remote-aes", "remote-insecure")
    for st in res["summary"].values():
        assert set(st["impls"]) == {*REMOTE, "zmq-remote"}
        assert set(st["ratios"]) == {f"{i}/vllm-remote{a}" for i in modes for a in ("", " all")} | {"remote-insecure/zmq-remote"}


def test_each_remote_mode_has_its_own_floor_and_no_floor_has_a_ratio_of_its_own():
    """Issue 53: each mode over ZeroMQ's own sockets with only that mode's cipher: ``remote-insecure``
    over ``zmq-remote``, CURVE (``remote``) over ``zmq-remote-curve``, ``remote-aes`` over
    ``zmq-remote-aes``; also in a run without vLLM; vLLM's row and the floors' own get none."""
    p50 = {"remote": 300.0, "remote-insecure": 150.0, "remote-aes": 200.0, "zmq-remote": 100.0, "zmq-remote-curve": 150.0,
           "zmq-remote-aes": 160.0, "vllm-remote": 120.0}
    raw = {"sched256/1r/remote": {i: [{"p50_us": p, "all_p50_us": p, "enqueue_p50_us": 1.0, "faults_p50": 0, "faults_mean": 0.0, "reader_faults_mean": 0.0}]
                                  for i, p in p50.items()}}
    ratios = harness.summarize(raw)["sched256/1r/remote"]["ratios"]
    assert ratios["remote/zmq-remote-curve"] == 2.0 and ratios["remote-insecure/zmq-remote"] == 1.5 and ratios["remote-aes/zmq-remote-aes"] == 1.25
    assert "vllm-remote/zmq-remote" not in ratios and not any(k.startswith("zmq-remote") for k in ratios)
    del raw["sched256/1r/remote"]["vllm-remote"]
    ratios = harness.summarize(raw)["sched256/1r/remote"]["ratios"]
    assert set(ratios) == {"remote/zmq-remote-curve", "remote-insecure/zmq-remote", "remote-aes/zmq-remote-aes"}
    rows = {r.split("|")[2].strip(): r.split("|")[-2].strip() for r in harness.table({"summary": harness.summarize(raw)}).splitlines()[2:]}
    assert rows == {"remote": "2.00", "remote-insecure": "1.50", "remote-aes": "1.25", "zmq-remote": "", "zmq-remote-curve": "", "zmq-remote-aes": ""}


def test_issue_53_verdicts_on_both_harnesses():
    """The goals of issue 53, from the second harness's summary and from the bench's: each mode over
    vLLM and over its floor, and page faults per 1 MiB / 16 MiB message (a missing figure: no verdict)."""
    from ringcast_lab.bench.goals import REMOTE_GOALS, evaluate_goals

    p50 = {"remote": 100.0, "remote-insecure": 100.0, "remote-aes": 100.0, "vllm-remote": 100.0, "zmq-remote": 100.0,
           "zmq-remote-curve": 50.0, "zmq-remote-aes": 100.0}
    row = {"all_p50_us": 1.0, "enqueue_p50_us": 1.0, "faults_p50": 0, "faults_mean": 0.0, "reader_faults_mean": 0.0, "reader_faults_p50": 0}
    raw = {f"{p}/{n}r/remote": {i: [{"p50_us": v, **row}] for i, v in p50.items()} for p in ("sched256", "blob64k", "dict1m", "blob16m") for n in (1, 3)}
    raw["blob16m/1r/remote"]["remote-aes"][0]["reader_faults_p50"] = 3
    v = {g["goal"]: g["met"] for g in harness.verdicts(harness.summarize(raw))}
    assert len([g for g in v if "one-way" in g]) == len(REMOTE_GOALS)
    assert v["dict1m/1r/remote: remote one-way p50 <= 1.15x zmq-remote-curve's"] is False  # 2x its floor
    assert v["sched256/1r/remote: remote-insecure one-way p50 <= 1.15x zmq-remote's"] is True
    assert v["blob16m/1r/remote: remote-aes page faults per message, writer and reader: 0"] is False
    assert v["dict1m/1r/remote: remote page faults per message, writer and reader: 0"] is True
    bench = {f"hot/{p}/{n}r/remote": {"impls": {i: {"p50_us": x, "enqueue_faults_p50": 0, "reader_faults_p50": 0} for i, x in p50.items()}}
             for p in ("sched256", "dict1m") for n in (1, 3)}
    goals = {g["goal"]: g["met"] for g in evaluate_goals(bench)}
    assert goals["dict1m/3r/remote: remote-aes one-way p50 <= 1.5x vllm-remote's"] is True
    assert goals["dict1m/1r/remote: remote one-way p50 <= 1.15x zmq-remote-curve's"] is False


def test_warm_up_laps_are_per_family():
    """A remote case's untimed lap goes to the remote groups only, and a payload of both families
    gets one lap in each (the local rings and the remote sockets are different queues)."""
    from ringcast_lab.bench.runner import _warm_payload

    class Group:
        writer = None

        def __init__(self):
            self.laps = []

        def pause(self, stopped):
            pass

        def batch(self, case, payload):
            self.laps.append(case.payload)

    groups = {"ringcast": Group(), "remote": Group(), "vllm-remote": Group()}
    warmed, errors = set(), []
    for case in (Case("dict1m", 1, "hot", 60, family="remote"), Case("dict1m", 1, "flood", 60, family="remote"), Case("dict1m", 1, "hot", 60)):
        _warm_payload(groups, case, b"x", {}, warmed, errors, [x for x in groups if family_of(x) == case.family])
    assert [groups[x].laps for x in groups] == [["dict1m"], ["dict1m"], ["dict1m"]] and not errors
    assert warmed == {("remote", "dict1m"), ("local", "dict1m")}


def test_bench_list_names_the_remote_cases_and_implementations(tmp_path, capsys):
    assert main(["bench", "--list", "--vllm-loader", _loader(tmp_path, "fake_vllm_loader_r4")]) == 0
    out = capsys.readouterr().out
    assert all(i in out.splitlines()[0] for i in REMOTE)
    assert "hot/blob16m/3r/remote" in out and "flood/sched256/1r/remote" in out and "3 remote reader(s)" in out
