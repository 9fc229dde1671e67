"""The second benchmark harness (``python -m ringcast_lab.bench.harness``), the floor it measures
against, and the allocator state the benchmarks set. Benchmarks are not pass/fail tests: these only
check that the harness runs and reports, that the floor delivers every payload intact, and that the
allocator effect the bench's conditions rest on is there (page-fault counts, no timing)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from ringcast_lab.bench import harness
from ringcast_lab.bench.cases import make_payload
from ringcast_lab.bench.floor import FloorReader, FloorWriter


def test_floor_delivers_every_payload_and_reuses_its_slots():
    w = FloorWriter(1, 2 << 20, slots=3)
    r = FloorReader(*w.handle(), 0)
    try:
        w.wait_attached(10.0)
        for i, name in enumerate(["sched256", "blob64k", "dict1m", "sched256", "dict1m"]):  # wraps 3 slots
            x = make_payload(name)
            w.send(("d", i, 0, x))
            got = r.recv()
            assert got[:2] == ("d", i) and got[3] == x
        with pytest.raises(ValueError, match="does not fit"):
            w.send(b"x" * (3 << 20))
    finally:
        r.close()
        w.close()


def test_floor_copies_out_of_band_buffers_out_or_hands_views():
    np = pytest.importorskip("numpy")
    for view in (False, True):
        w = FloorWriter(1, 2 << 20, slots=2)
        r = FloorReader(*w.handle(), 0, view=view)
        try:
            w.wait_attached(10.0)
            a = make_payload("np1m")
            w.send(a)
            b = r.recv()
            assert np.array_equal(a, b) and b.flags.writeable is (not view)
            del b
        finally:
            r.close()
            w.close()


@pytest.mark.timeout(240)
@pytest.mark.parametrize("acks", ["block", "poll"])
def test_harness_runs_and_reports(tmp_path, acks):
    """Small and bounded: 1 reader, the 256 B dict, 1 repeat of 5 messages, ringcast and the floor
    (vLLM needs the peer; the fake loader of test_bench_loader stands in for it)."""
    loader = tmp_path / "fake_vllm_loader_h.py"
    loader.write_text("from ringcast import MessageQueue\n")
    out = tmp_path / "h.json"
    rc = harness.main(["--payload", "sched256", "--readers", "1", "--impl", "ringcast", "--impl", "floor", "--impl", "vllm",
                       "--repeats", "1", "--scale", "0.01", "--acks", acks, "--vllm-loader", str(loader), "--out", str(out)])
    assert rc == 0
    res = json.loads(out.read_text())
    st = res["summary"]["sched256/1r"]
    assert set(st["impls"]) == {"ringcast", "floor", "vllm"}
    assert set(st["ratios"]) == {"rc/vllm", "rc/vllm all", "rc/floor"} and all(v > 0 for v in st["ratios"].values())
    for v in st["impls"].values():
        assert v["p50_us"] > 0 and v["enqueue_p50_us"] > 0 and v["faults_mean"] >= 0
        assert v["all_p50_us"] >= v["p50_us"]  # the last reader's time is no earlier than the median one
    assert [x["when"] for x in res["loadavg"]] == ["start", "end"] and res["acks"] == acks
    assert "|" in harness.table(res)


def test_which_impls_run_which_payloads():
    assert harness.applies("arena", "tensor64m") and not harness.applies("arena", "dict1m")
    assert harness.applies("ringcast", "dict1m") and not harness.applies("ringcast", "tensor64m")
    assert harness.applies("vllm", "tensor64m") and harness.applies("vllm", "sched256")
    for impl in ("remote", "remote-insecure", "vllm-remote"):
        assert harness.applies(impl, "blob16m") and harness.applies(impl, "sched256") and not harness.applies(impl, "tensor64m")
    assert harness.applies("overflow", "blob8m") and not harness.applies("overflow", "sched256")
    assert not harness.applies("ringcast", "blob8m") and not harness.applies("vllm", "blob16m")


_FAULTS = textwrap.dedent(
    """
    import ctypes, sys
    from ringcast_lab.bench.heap import minor_faults, warm_allocator
    libc = ctypes.CDLL(None)
    libc.malloc.restype = libc.realloc.restype = ctypes.c_void_p
    libc.malloc.argtypes, libc.free.argtypes = [ctypes.c_size_t], [ctypes.c_void_p]
    libc.realloc.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    if sys.argv[1] == "warm":
        warm_allocator()
    else:  # the largest chunk freed so far is ~1 MiB (a 1 MiB bytes object), as in the old bench
        libc.free(libc.malloc(1 << 20))
    out = []
    for _ in range(20):  # what vLLM's enqueue does to a BytesIO: grow 1 MiB + 1/8, shrink, free
        f0 = minor_faults()
        p = libc.malloc(1183744)
        ctypes.memset(p, 1, 1183744)
        p = libc.realloc(p, (1 << 20) + 64)
        libc.free(p)
        out.append(minor_faults() - f0)
    print(sorted(out)[10])
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="glibc's malloc")
@pytest.mark.timeout(60)
def test_warm_allocator_stops_a_1mib_pickle_buffer_faulting_per_call():
    """What the bench's conditions rest on (ringcast_lab.bench.heap): in a process whose largest freed
    chunk is ~1 MiB, a buffer grown to 1 MiB + 1/8 (vLLM's BytesIO), shrunk and freed maps fresh
    pages on every call (~289 minor faults); after warm_allocator() it reuses heap memory."""
    import platform

    if platform.libc_ver()[0] != "glibc":
        pytest.skip("the mmap-threshold behaviour is glibc's")
    p50 = {}
    for state in ("cold", "warm"):
        r = subprocess.run([sys.executable, "-c", _FAULTS, state], capture_output=True, text=True, timeout=50)
        assert r.returncode == 0, r.stderr
        p50[state] = int(r.stdout.split()[-1])
    assert p50["cold"] >= 250 and p50["warm"] <= 8, p50
