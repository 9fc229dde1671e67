#!/usr/bin/env python
"""GPU checks of ringcast.torch, on whatever GPUs this machine has, within a time limit.

Usage: ``python tests/gpu/run_gpu_checks.py [--time-limit S] [--world N]`` (default 600 s end
to end; children still running at the limit are killed). Prints one summary table; exit status
0 when every check that ran passed (no GPU: every check is SKIP, exit 0).

* **One-GPU mode** (>= 1 CUDA device): two ranks share device 0 over gloo (NCCL cannot put two
  ranks on one GPU), so CUDA tensors travel staged through pinned host buffers
  (``stage_device_tensors=True``). Checks: pinned staging buffers; a tensor dict of CUDA
  tensors restored on the receivers' device (values, dtypes, shapes, the current device left as
  it was); a device tensor over a gloo-only group without staging refused on every rank before
  the manifest (the free vLLM-shaped call too, and a CUDA tensor nested in a list); a
  dataclass of CUDA buffers filled in place (fixed and dynamic structure); a CUDA graph replayed
  on every step with inputs fed by the queue into its static buffers, against eager results.
* **NCCL mode** (>= 2 CUDA devices): one rank per GPU, an NCCL device group and a gloo CPU
  group, writer rank 0 and the last rank: CUDA tensor dicts, a dataclass into a CUDA shell, and
  the data phase captured in a CUDA graph and replayed.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import queue as _queue
import sys
import tempfile
import time
import traceback
from dataclasses import dataclass

MIB = 1024 * 1024


def _sample(device, seed):
    import torch

    g = torch.Generator().manual_seed(seed)
    base = torch.randn(6, 5, generator=g)
    return {
        "f32": torch.randn(3, 4, generator=g).to(device),
        "bf16": torch.randn(7, generator=g).to(torch.bfloat16).to(device),
        "bool": (torch.rand(9, generator=g) > 0.5).to(device),
        "zero_d": torch.tensor(2.5).to(device),
        "empty": torch.empty(0, 3, device=device),
        "noncontig": base.to(device).t(),
        "big": torch.arange(2 * MIB, dtype=torch.float32).to(device),
        "cpu": torch.arange(5),
        "meta": {"step": seed},
    }


def _check_dict(got, want, device):
    import torch

    assert list(got) == list(want)
    for k, w in want.items():
        if isinstance(w, torch.Tensor):
            g = got[k]
            want_dev = torch.device("cpu") if w.device.type == "cpu" else device
            assert g.device == want_dev, (k, g.device, want_dev)
            assert g.dtype == w.dtype and g.shape == w.shape, k
            assert torch.equal(g.cpu(), w.cpu()), k
        else:
            assert got[k] == w, k


@dataclass
class Step:
    ids: object
    mask: object
    positions: dict
    n: int


def _step_obj(torch, device, fill: bool) -> Step:
    if fill:
        return Step(torch.arange(16, device=device).reshape(2, 8), torch.ones(4, dtype=torch.bool, device=device), {128: torch.full((3,), 7.0, device=device)}, 5)
    return Step(torch.zeros(2, 8, dtype=torch.int64, device=device), torch.zeros(4, dtype=torch.bool, device=device), {128: torch.zeros(3, device=device)}, 0)


def _check_step(torch, obj: Step, ptr: int) -> None:
    torch.cuda.synchronize()
    assert obj.ids.data_ptr() == ptr and obj.n == 5, "not filled in place"
    assert torch.equal(obj.ids.cpu(), torch.arange(16).reshape(2, 8)) and bool(obj.mask.all())
    assert torch.equal(obj.positions[128].cpu(), torch.full((3,), 7.0))


class _Checks:
    """Runs named checks on one rank and records (name, ok, message, seconds)."""

    def __init__(self) -> None:
        self.rows: list = []

    def run(self, name, fn) -> None:
        t0 = time.monotonic()
        try:
            fn()
            self.rows.append((name, True, "", time.monotonic() - t0))
        except BaseException as e:  # noqa: BLE001 - reported in the table
            self.rows.append((name, False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}", time.monotonic() - t0))


def _report(rank, results, body) -> None:
    """Run ``body(checks)`` on this rank and send its rows (a failure outside a check is "setup")."""
    checks = _Checks()
    try:
        body(checks)
    except BaseException as e:  # noqa: BLE001
        checks.rows.append(("setup", False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}", 0.0))
    results.put((rank, checks.rows))


def _dataclass_in_place(torch, g, device, structure: str = "fixed") -> None:
    obj = _step_obj(torch, device, g.is_writer)
    ptr = obj.ids.data_ptr()
    g.broadcast_dataclass(obj, structure=structure)
    _check_step(torch, obj, ptr)


# -- one-GPU mode ----------------------------------------------------------------------------------
def _one_gpu_rank(rank, world, store, results):
    _report(rank, results, lambda checks: _one_gpu_checks(checks, rank, world, store))


def _one_gpu_checks(checks, rank, world, store):
    import pytest
    import torch
    import torch.distributed as dist

    import ringcast.torch as rt
    from ringcast.torch import staging_buffer

    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    torch.cuda.set_device(0)
    device = torch.device("cuda", 0)
    dist.init_process_group("gloo", init_method=f"file://{store}", rank=rank, world_size=world)
    cpu = dist.group.WORLD
    staged = rt.BroadcastGroup(cpu, None, stage_device_tensors=True, connect_ip="127.0.0.1", timeout=60)
    plain = rt.BroadcastGroup(cpu, None, mq=staged.mq, device=device)
    w = staged.is_writer
    try:
        checks.run("pinned staging buffers", lambda: _assert(staging_buffer(4096).is_pinned(), "the staging buffer is not pinned"))

        def restore():
            for seed in range(3):
                want = _sample(device, seed)
                got = staged.broadcast_tensor_dict(want if w else None)
                torch.cuda.synchronize()
                _check_dict(got, want, device)
                assert torch.cuda.current_device() == 0

        checks.run("tensor dict staged via gloo, restored on the device", restore)

        def refused():
            for bad in ({"x": torch.ones(2, device=device)}, {"n": [torch.ones(1, device=device)]}):
                if w:
                    with pytest.raises(rt.BroadcastError, match="cuda tensor"):
                        plain.broadcast_tensor_dict(bad)
                    with pytest.raises(rt.BroadcastError, match="cuda tensor"):
                        rt.broadcast_tensor_dict(bad, src=0, group=cpu, metadata_group=cpu, mq=staged.mq)
                else:
                    for _ in range(2):
                        with pytest.raises(rt.SenderError, match="cuda tensor"):
                            plain.broadcast_tensor_dict()
            got = staged.broadcast_tensor_dict({"ok": torch.arange(3, device=device)} if w else None)
            assert got["ok"].device == device and torch.equal(got["ok"].cpu(), torch.arange(3))

        checks.run("cuda tensor over a gloo-only group refused on every rank", refused)

        def dataclass_in_place():
            for structure in ("fixed", "dynamic"):
                _dataclass_in_place(torch, staged, device, structure)

        checks.run("dataclass of CUDA buffers filled in place (staged)", dataclass_in_place)
        checks.run("CUDA graph replay fed by the queue", lambda: _graph_fed_by_queue(torch, staged, device))
    finally:
        staged.close()
        dist.destroy_process_group()


def _assert(cond, msg):
    assert cond, msg


@dataclass
class GraphIn:
    x: object
    scale: object
    step: int


def _graph_fed_by_queue(torch, g, device):
    """Static input buffers, a captured step (matmul, scale, relu), and each step's inputs arriving
    through the queue into those buffers; the replay must equal the eager computation."""
    static = GraphIn(torch.zeros(64, 64, device=device), torch.zeros(1, device=device), 0)
    weight = torch.arange(64 * 64, dtype=torch.float32, device=device).reshape(64, 64) / 4096.0
    ptrs = (static.x.data_ptr(), static.scale.data_ptr())

    def step():
        return torch.relu(static.x @ weight * static.scale)

    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()  # warm-up outside the capture
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        out = step()
    for i in range(1, 6):
        if g.is_writer:
            gen = torch.Generator().manual_seed(i)
            msg = GraphIn(torch.randn(64, 64, generator=gen).to(device), torch.full((1,), float(i), device=device), i)
        else:
            msg = static
        g.broadcast_dataclass(msg if g.is_writer else static)
        if g.is_writer:
            static.x.copy_(msg.x)
            static.scale.copy_(msg.scale)
            static.step = i
        assert (static.x.data_ptr(), static.scale.data_ptr()) == ptrs and static.step == i
        graph.replay()
        torch.cuda.synchronize()
        gen = torch.Generator().manual_seed(i)
        want = torch.relu(torch.randn(64, 64, generator=gen).to(device) @ weight * float(i))
        assert torch.allclose(out, want), (i, (out - want).abs().max().item())


# -- NCCL mode (>= 2 GPUs) -------------------------------------------------------------------------
def _nccl_rank(rank, world, store, writer_rank, results):
    _report(rank, results, lambda checks: _nccl_checks(checks, rank, world, store, writer_rank))


def _nccl_checks(checks, rank, world, store, writer_rank):
    import torch
    import torch.distributed as dist

    import ringcast.torch as rt

    torch.cuda.set_device(rank)
    device = torch.device("cuda", rank)
    dist.init_process_group("nccl", init_method=f"file://{store}", rank=rank, world_size=world, device_id=device)
    cpu_group = dist.new_group(list(range(world)), backend="gloo")
    g = rt.BroadcastGroup(cpu_group, dist.group.WORLD, writer_rank=writer_rank, timeout=60)
    try:
        assert g.device == device

        def dicts():
            for seed in range(3):
                want = _sample(device, seed)
                got = g.broadcast_tensor_dict(want if g.is_writer else None)
                torch.cuda.synchronize()
                _check_dict(got, want, device)
            # vLLM's shape: group = the NCCL group, metadata_group = the gloo group
            want = _sample(device, 7)
            got = rt.broadcast_tensor_dict(want if g.is_writer else None, src=writer_rank, group=dist.group.WORLD, metadata_group=cpu_group)
            torch.cuda.synchronize()
            _check_dict(got, want, device)

        checks.run("NCCL tensor dicts", dicts)

        checks.run("NCCL dataclass into a CUDA shell", lambda: _dataclass_in_place(torch, g, device))
        checks.run("NCCL data phase in a CUDA graph", lambda: _nccl_graph(torch, rt, g, device))
    finally:
        g.close()
        dist.destroy_process_group()


def _nccl_graph(torch, rt, g, device):
    src = g.writer_global_rank
    buf = torch.zeros(1024, device=device)
    flags = torch.zeros(8, dtype=torch.bool, device=device)
    rt.broadcast_tensors([buf, flags], src, g.cpu_group, g.device_group, async_op=False)  # warm-up (communicator init)
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        rt.broadcast_tensors([buf, flags], src, g.cpu_group, g.device_group, async_op=False)
    torch.cuda.current_stream().wait_stream(stream)
    torch.cuda.synchronize()
    with torch.cuda.graph(graph):
        rt.broadcast_tensors([buf, flags], src, g.cpu_group, g.device_group, async_op=False)
    for i in range(1, 4):
        if g.is_writer:
            buf.fill_(float(i))
            flags.fill_(i % 2 == 1)
        else:
            buf.zero_()
            flags.fill_(i % 2 == 0)
        torch.cuda.synchronize()
        g.broadcast_object(i if g.is_writer else None)  # keep the ranks in step between replays
        graph.replay()
        torch.cuda.synchronize()
        assert bool((buf == float(i)).all()), (i, buf[:4])
        assert bool((flags == (i % 2 == 1)).all()), (i, flags)


# -- driver ----------------------------------------------------------------------------------------
def _launch(target, world, extra, timeout):
    """Run ``target(rank, world, store, *extra, results)`` on ``world`` ranks; {rank: rows} of
    the ranks that reported within ``timeout`` seconds (the others are killed)."""
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    out: dict = {}
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=target, args=(r, world, store, *extra, results), daemon=True) for r in range(world)]
        for p in procs:
            p.start()
        deadline = time.monotonic() + timeout
        try:
            while len(out) < world and time.monotonic() < deadline:
                try:
                    rank, rows = results.get(timeout=1)
                except _queue.Empty:
                    if any(not p.is_alive() and p.exitcode not in (0, None) for p in procs):
                        deadline = min(deadline, time.monotonic() + 5)
                    continue
                out[rank] = rows
                if any(not ok for _, ok, _, _ in rows):
                    deadline = min(deadline, time.monotonic() + 10)  # the others may be stuck on it
        finally:
            for p in procs:
                p.join(timeout=5 if len(out) == world else 0.1)
                if p.is_alive():
                    p.kill()
                    p.join(5)
    return out


def _merge(mode, world, out, names) -> list:
    """One row per check: PASS only if every rank passed it."""
    rows = []
    seen = list(names)
    for r in sorted(out):
        seen += [n for n, *_ in out[r] if n not in seen]
    for name in seen:
        per = {r: next((row for row in out.get(r, []) if row[0] == name), None) for r in range(world)}
        if all(v is None for v in per.values()):
            if name in names:
                rows.append((mode, name, "FAIL", 0.0, "no rank reported it (time limit, or a crash)"))
            continue
        bad = {r: v for r, v in per.items() if v is None or not v[1]}
        secs = max(v[3] for v in per.values() if v is not None)
        detail = "".join(f"\n--- rank {r} ---\n{'no result' if v is None else v[2]}" for r, v in sorted(bad.items()))
        rows.append((mode, name, "FAIL" if bad else "PASS", secs, detail))
    return rows


ONE_GPU = [
    "pinned staging buffers",
    "tensor dict staged via gloo, restored on the device",
    "cuda tensor over a gloo-only group refused on every rank",
    "dataclass of CUDA buffers filled in place (staged)",
    "CUDA graph replay fed by the queue",
]
NCCL = ["NCCL tensor dicts", "NCCL dataclass into a CUDA shell", "NCCL data phase in a CUDA graph"]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--time-limit", type=float, default=600.0, help="seconds end to end (default 600)")
    ap.add_argument("--world", type=int, default=0, help="ranks of the NCCL mode (default: min(#GPUs, 4))")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    end = t0 + args.time_limit
    import torch

    n = torch.cuda.device_count()
    rows = []
    if n < 1:
        rows += [("one-GPU", c, "SKIP", 0.0, "no CUDA device") for c in ONE_GPU]
    else:
        out = _launch(_one_gpu_rank, 2, (), max(1.0, min(240.0, end - time.monotonic())))
        rows += _merge("one-GPU", 2, out, ONE_GPU)
    world = args.world or min(n, 4)
    if n < 2 or world < 2 or world > n:
        rows += [("NCCL", c, "SKIP", 0.0, f"needs >= 2 CUDA devices (found {n})") for c in NCCL]
    else:
        for writer in (0, world - 1):
            left = end - time.monotonic()
            mode = f"NCCL w{world} writer {writer}"
            if left < 20:
                rows += [(mode, c, "FAIL", 0.0, "no time left") for c in NCCL]
                continue
            rows += _merge(mode, world, _launch(_nccl_rank, world, (writer,), min(180.0, left)), NCCL)
    width = max(len(r[1]) for r in rows)
    print(f"\nringcast GPU checks: {n} CUDA device(s), {time.monotonic() - t0:.1f}s of {args.time_limit:.0f}s")
    print(f"{'mode':<22} {'check':<{width}}  result  seconds")
    for mode, name, res, secs, _ in rows:
        print(f"{mode:<22} {name:<{width}}  {res:<6}  {secs:7.2f}")
    for mode, name, res, _, detail in rows:
        if res == "FAIL":
            print(f"\n=== FAIL {mode}: {name} ==={detail}")
    failed = sum(r[2] == "FAIL" for r in rows)
    print(f"\n{sum(r[2] == 'PASS' for r in rows)} passed, {failed} failed, {sum(r[2] == 'SKIP' for r in rows)} skipped")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
