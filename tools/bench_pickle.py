"""Where the time of a message goes: pickling into parts vs ``pickle.dumps``, and the 256 B path
step by step (issue 14, docs/performance.md). A measuring script, not a test: it asserts nothing.

    python tools/bench_pickle.py serialize   # dumps vs parts (+ the copy into a chunk), loads, memcpy
    python tools/bench_pickle.py steps       # 256 B hot path: writer and reader time per ring step

``serialize``: every variant runs in one process, interleaved round by round; medians of per-call
``perf_counter_ns``. "into chunk" adds the copy of the result into a preallocated, touched
shared-memory-sized buffer (what the queue does after pickling).

``steps``: a real :class:`ringcast.MessageQueue` with one reader process, hot ping-pong (the writer
waits for the reader's acknowledgement in a shared counter before the next message, like ``ringcast
bench``). A step hook records ``perf_counter_ns`` before each ring step on both sides (CLOCK_MONOTONIC:
comparable across processes); each transition (enqueue entry -> first step -> ... -> exit) gets the
median of its duration over the messages. The hook itself costs ~0.1-0.2 us per step, so the
transitions are upper bounds; the same run without the hook gives the real totals.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import pickle
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "src"))

from ringcast_lab.bench.cases import make_payload  # noqa: E402
from ringcast.pickling import PartsPickler  # noqa: E402


def _median_us(xs: list[int]) -> float:
    return statistics.median(xs) / 1e3


def _variants(msg, chunk: memoryview):
    pp = PartsPickler()
    dumps = pickle.dumps

    def do_dumps():
        bufs: list = []
        return dumps(msg, protocol=5, buffer_callback=bufs.append), bufs

    def do_parts():
        return pp.dump(msg)

    def dumps_into_chunk():
        main, bufs = do_dumps()
        n = len(main)
        chunk[1 : 1 + n] = main
        off = 1 + n
        for b in bufs:
            r = b.raw()
            chunk[off : off + r.nbytes] = r
            off += r.nbytes

    def parts_into_chunk():
        parts, _main_len, bufs, _total = pp.dump(msg)
        off = 1
        for p in parts:
            end = off + len(p)
            chunk[off:end] = p
            off = end
        for b in bufs:
            end = off + b.nbytes
            chunk[off:end] = b
            off = end

    out = {"pickle.dumps": do_dumps, "parts": do_parts, "dumps+copy into chunk": dumps_into_chunk, "parts+copy into chunk": parts_into_chunk}
    if "torch" in sys.modules and any(isinstance(x, sys.modules["torch"].Tensor) for x in msg):
        ppt = PartsPickler(tensors=True)

        def tensor_parts_into_chunk():
            parts, _main_len, bufs, _total = ppt.dump(msg)
            off = 1
            for p in [*parts, *bufs]:
                end = off + memoryview(p).nbytes
                chunk[off:end] = p
                off = end

        out["parts(tensors=True)+copy"] = tensor_parts_into_chunk
    return out


def cmd_serialize(args) -> None:
    names = args.payload or ["sched256", "dict1m", "np1m"]
    for name in names:
        msg = ("d", 1, time.monotonic_ns(), make_payload(name))
        bufs: list = []
        main = pickle.dumps(msg, protocol=5, buffer_callback=bufs.append)
        size = len(main) + sum(b.raw().nbytes for b in bufs)
        chunk = memoryview(bytearray(size + 64))
        chunk[:] = b"\x01" * len(chunk)  # touched: no first-use page faults in the measurement
        variants = _variants(msg, chunk)
        parts = PartsPickler().dump(msg)
        n = args.n if size < (1 << 20) else max(20, args.n // 50)
        if size >= (32 << 20):
            n = max(5, args.n // 2000)

        raws = [b.raw() for b in bufs]

        def memcpy():
            chunk[1 : 1 + len(main)] = main
            off = 1 + len(main)
            for r in raws:
                chunk[off : off + r.nbytes] = r
                off += r.nbytes

        def loads():
            pickle.loads(chunk[1 : 1 + len(main)], buffers=[bytearray(b.raw()) for b in bufs])  # in place, as the queue reads

        variants["memcpy (pickle+buffers)"] = memcpy
        chunk[1 : 1 + len(main)] = main
        variants["loads from chunk"] = loads  # out-of-band buffers copied out, as the queue does
        res: dict[str, list[int]] = {k: [] for k in variants}
        now = time.perf_counter_ns
        for rnd in range(args.rounds):
            order = list(variants) if rnd % 2 == 0 else list(reversed(variants))
            for k in order:
                f = variants[k]
                for _ in range(n):
                    t0 = now()
                    f()
                    res[k].append(now() - t0)
        print(f"\n{name}: pickle {len(main)} B + {len(bufs)} out-of-band buffer(s), {size} B in all; "
              f"parts: {len(parts[0])} ({', '.join(str(len(p)) for p in parts[0][:6])}{', ...' if len(parts[0]) > 6 else ''}); "
              f"{args.rounds} rounds x {n}")
        for k, xs in res.items():
            print(f"  {k:<24} p50 {_median_us(xs):9.2f} us   p90 {sorted(xs)[int(len(xs) * 0.9)] / 1e3:9.2f} us")


# ----------------------------------------------------------------------------------- steps


def _install(rec: list, now):
    """Record ``(action, now())`` before each step; returns the setter (call it with None)."""
    try:
        from ringcast.steps import set_step_hook
    except ImportError:  # older tree: the hook lives in ring.py
        from ringcast.ring import set_step_hook

    def hook(action, *_rest):
        rec.append((action, now()))

    set_step_hook(hook)
    return set_step_hook


def _transitions(ops: list[list]) -> dict[str, list[int]]:
    out: dict[str, list[int]] = {}
    for rec in ops:
        for (a, ta), (b, tb) in zip(rec, rec[1:]):
            out.setdefault(f"{a} -> {b}", []).append(tb - ta)
    return out


def _reader(handle, ack, conn, n: int, hooked: bool) -> None:
    from ringcast import MessageQueue

    mq = MessageQueue.create_from_handle(handle, 0, warn_interval=3600.0)
    mq.wait_until_ready(timeout=60)
    now = time.perf_counter_ns
    rec: list = []
    if hooked:
        _install(rec, now)
    ops, totals, one_way = [], [], []
    for i in range(n):
        rec.clear()
        t0 = now()
        m = mq.dequeue(timeout=60)
        t1 = now()
        ack.value = i + 1
        one_way.append(t1 - m[2])
        # from the step that saw the message (the last ReaderLoadWritten) to the return
        seen = max((k for k, (a, _t) in enumerate(rec) if a == "ReaderLoadWritten"), default=None)
        if seen is not None:
            ops.append(rec[seen:] + [("return", t1)])
            totals.append(t1 - rec[seen][1])
        elif not hooked:
            totals.append(t1 - t0)
    conn.send({"ops": ops, "totals": totals, "one_way": one_way})
    mq.close()


def _run_steps(n: int, hooked: bool) -> dict:
    from ringcast import MessageQueue

    ctx = mp.get_context("spawn")
    mq = MessageQueue(1, 1, warn_interval=3600.0)
    ack = ctx.RawValue("q", 0)
    r, w = ctx.Pipe(duplex=False)
    p = ctx.Process(target=_reader, args=(mq.export_handle(), ack, w, n, hooked), daemon=True)
    p.start()
    try:
        mq.wait_until_ready(timeout=60)
        payload = make_payload("sched256")
        now = time.perf_counter_ns
        rec: list = []
        setter = _install(rec, now) if hooked else None
        ops, totals = [], []
        for i in range(n):
            rec.clear()
            t0 = now()
            mq.enqueue(("d", i, t0, payload), timeout=60)
            t1 = now()
            ops.append([("enter", t0), *rec, ("return", t1)])
            totals.append(t1 - t0)
            while ack.value < i + 1:
                os.sched_yield()
        if not r.poll(120):
            raise TimeoutError("reader sent no result")
        res = r.recv()
    finally:
        if setter is not None:
            setter(None)
        p.join(30)
        if p.is_alive():
            p.kill()
            p.join(5)
        mq.close()
    return {"w_ops": ops, "w_totals": totals, **res}


def cmd_steps(args) -> None:
    payload = make_payload("sched256")
    msg = ("d", 1, time.monotonic_ns(), payload)
    pk = []
    for _ in range(20000):
        t0 = time.perf_counter_ns()
        pickle.loads(pickle.dumps(msg, protocol=5))
        pk.append(time.perf_counter_ns() - t0)
    plain = _run_steps(args.n, hooked=False)
    hooked = _run_steps(args.n, hooked=True)
    print(f"\n256 B dict, 1 reader, hot, {args.n} messages; pickle dumps+loads p50 {_median_us(pk):.2f} us")
    print(f"  without hook: one-way p50 {_median_us(plain['one_way']):.2f} us, enqueue p50 {_median_us(plain['w_totals']):.2f} us, "
          f"dequeue (call to return, includes waiting) p50 {_median_us(plain['totals']):.2f} us")
    print(f"  with hook:    one-way p50 {_median_us(hooked['one_way']):.2f} us, enqueue p50 {_median_us(hooked['w_totals']):.2f} us")
    for side, ops in (("writer (enqueue)", hooked["w_ops"]), ("reader (from seeing the message to return)", hooked["ops"])):
        print(f"  {side}:")
        for k, xs in _transitions(ops).items():
            if len(xs) >= len(ops) // 2:
                print(f"    {k:<44} p50 {_median_us(xs):7.2f} us  (n={len(xs)})")
    # Cross-process: writer's publish step to the reader's ReaderLoadWritten that saw it.
    wake = [r[0][1] - next(t for a, t in w if a == "WriterPublish") for w, r in zip(hooked["w_ops"], hooked["ops"]) if r and any(a == "WriterPublish" for a, _ in w)]
    if wake:
        print(f"  WriterPublish -> reader sees it: p50 {_median_us(wake):.2f} us")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("serialize", help="pickle.dumps vs parts, copy into a chunk, loads, memcpy")
    s.add_argument("--payload", action="append", help="sched256, blob64k, dict1m, np1m, tensor64m (repeatable)")
    s.add_argument("--rounds", type=int, default=5)
    s.add_argument("-n", type=int, default=2000, help="calls per round for small payloads")
    t = sub.add_parser("steps", help="the 256 B hot path, step by step")
    t.add_argument("-n", type=int, default=3000)
    args = ap.parse_args(argv)
    {"serialize": cmd_serialize, "steps": cmd_steps}[args.cmd](args)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
