#!/usr/bin/env python
"""GPU checks of ringcast.torch (NCCL + CUDA tensors). Needs >= 2 CUDA devices; runs in well
under 5 minutes. Usage: ``python tests/gpu/run_gpu_checks.py [--world N] [--timeout S]``.

Each rank owns one GPU; the world group is NCCL (the device group), a gloo group over the same
ranks is the CPU group. Checks, for writer rank 0 and for the last rank:

1. ``broadcast_tensor_dict`` with CUDA tensors (fp32, bf16, bool, 0-d, empty, non-contiguous,
   8 MiB) mixed with CPU tensors and plain values; receivers get them on their own device.
2. ``broadcast_dataclass`` into a shell of CUDA tensors (filled in place, same storage).
3. The data phase (``broadcast_tensors``) captured in a CUDA graph and replayed with new data.

Exit status 0 when every rank passes; each rank's traceback is printed otherwise. Children that
do not finish within ``--timeout`` seconds are killed.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
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


def _rank_main(rank, world, store, writer_rank, results):
    try:
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
            # 1. tensor dicts with CUDA tensors
            for seed in range(3):
                want = _sample(device, seed)
                got = g.broadcast_tensor_dict(want if g.is_writer else None)
                torch.cuda.synchronize()
                _check_dict(got, want, device)
            # 2. a dataclass into a CUDA shell
            if g.is_writer:
                obj = Step(torch.arange(16, device=device).reshape(2, 8), torch.ones(4, dtype=torch.bool, device=device), {128: torch.full((3,), 7.0, device=device)}, 5)
            else:
                obj = Step(torch.zeros(2, 8, dtype=torch.int64, device=device), torch.zeros(4, dtype=torch.bool, device=device), {128: torch.zeros(3, device=device)}, 0)
            ptr = obj.ids.data_ptr()
            g.broadcast_dataclass(obj)
            torch.cuda.synchronize()
            assert obj.ids.data_ptr() == ptr and obj.n == 5
            assert torch.equal(obj.ids.cpu(), torch.arange(16).reshape(2, 8)) and bool(obj.mask.all())
            assert torch.equal(obj.positions[128].cpu(), torch.full((3,), 7.0))
            # 3. the data phase in a CUDA graph
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
        finally:
            g.close()
            dist.destroy_process_group()
        results.put((rank, True, "ok"))
    except BaseException as e:  # noqa: BLE001
        results.put((rank, False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


def run(world: int, writer_rank: int, timeout: float) -> bool:
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    with tempfile.TemporaryDirectory() as tmp:
        store = os.path.join(tmp, "store")
        procs = [ctx.Process(target=_rank_main, args=(r, world, store, writer_rank, results), daemon=True) for r in range(world)]
        for p in procs:
            p.start()
        out: dict = {}
        deadline = time.monotonic() + timeout
        try:
            while len(out) < world and time.monotonic() < deadline:
                try:
                    rank, ok, msg = results.get(timeout=1)
                except Exception:  # noqa: BLE001 - queue.Empty
                    if any(not p.is_alive() and p.exitcode not in (0, None) for p in procs):
                        break
                    continue
                out[rank] = (ok, msg)
                if not ok:
                    deadline = min(deadline, time.monotonic() + 10)  # the others may be stuck on it
        finally:
            for p in procs:
                p.join(timeout=5 if len(out) == world else 0.1)
                if p.is_alive():
                    p.kill()
                    p.join(5)
    good = len(out) == world and all(ok for ok, _ in out.values())
    print(f"[writer_rank={writer_rank}, world={world}] {'PASS' if good else 'FAIL'}")
    for r in range(world):
        ok, msg = out.get(r, (False, f"no result (exit code {procs[r].exitcode})"))
        if not ok:
            print(f"--- rank {r} ---\n{msg}")
    return good


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--world", type=int, default=0, help="ranks (default: min(#GPUs, 4))")
    ap.add_argument("--timeout", type=float, default=120.0, help="seconds per configuration")
    args = ap.parse_args(argv)
    import torch

    n = torch.cuda.device_count()
    world = args.world or min(n, 4)
    if n < 2 or world < 2 or world > n:
        print(f"SKIP: needs >= 2 CUDA devices (found {n}, world {world})")
        return 0 if n < 2 else 2
    ok = all([run(world, 0, args.timeout), run(world, world - 1, args.timeout)])
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
