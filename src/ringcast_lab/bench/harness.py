"""A second benchmark harness, independent of ``ringcast bench``'s runner (docs/performance.md).

    python -m ringcast_lab.bench.harness --vllm-loader ../shared/peers/vllm_peer.py --out h.json

For each reader count, each implementation gets its own writer process (spawned, clean: it runs
nothing but that implementation), and that writer spawns its readers. The main process only
orchestrates: for each of ``repeats`` repeats and each payload it asks every writer in turn
(alternating order) for one batch. In a batch the writer sends ``("d", seq, t_send_ns, payload)``
(the bench's message) after 10 unmeasured ones that touch every chunk, each reader stamps ``time.monotonic_ns()`` after ``dequeue`` returned and
writes 1 to an eventfd, and the writer blocks on the eventfd until every reader has acknowledged
before it sends the next message. Reported per batch: one-way p50 over all readers, the p50 over
messages of the time until the last reader had it ("all readers"), the writer's
``enqueue`` p50, the writer's minor page faults per ``enqueue`` and the readers' per receive (``getrusage``). Per case: the
median over repeats, and ratios of those medians.

Implementations: ``ringcast`` (``MessageQueue`` defaults), ``ringcast-poll`` (the same queue, its
readers waiting the event loop's way: ``select`` on ``fileno()``, then ``dequeue_nowait``), ``arena`` (the same with a tensor arena
of 3 x 72 MiB; the 64 MiB tensor case), ``vllm`` (vLLM's ``MessageQueue`` from ``--vllm-loader``),
``floor`` and ``floor-arena`` (:mod:`.floor`: 10 slots of 2 MiB; 3 slots of 72 MiB with views).
Remote readers (issue 42): ``remote`` (ringcast's TCP readers on 127.0.0.1, CURVE, the default),
``remote-aes`` (``remote_security="aes-gcm"``), ``remote-insecure`` (``remote_insecure=True``) and ``vllm-remote`` (vLLM's class, the same shape:
``n_local_reader=0``, cleartext), and each mode's floor (issue 53, :mod:`.zmqfloor`): ``zmq-remote``
(pyzmq PUB/SUB on the same TCP, pickle protocol 5, no copy: what the sockets and pickle cost with
nothing of a queue), ``zmq-remote-curve`` (the same with CurveZMQ) and ``zmq-remote-aes`` (the same
with every frame sealed and opened with AES-256-GCM), each remote ringcast mode's "ringcast /
floor"; payloads up to 16 MiB (``blob16m``). ``verdicts`` in the JSON: issue 53's goals
(:func:`.goals.remote_verdicts`). Overflow: ``overflow`` and
``vllm-overflow``, local readers on 1 MiB chunks, so ``dict1m`` and an 8 MiB ``bytes`` (``blob8m``)
go over the overflow socket. Their cases are named ``<payload>/<n>r/remote`` and
``.../overflow``; each ringcast implementation's ratio is over its vLLM peer (``PEER``).
Every implementation but ``floor-arena`` is :mod:`.transports`' writer and reader of that name,
the code ``ringcast bench`` runs; what this harness does its own way is the rest: the processes,
the eventfd acks, the batches and the statistics.
``--heap`` puts every process in an allocator state (:mod:`.heap`): ``clean``, ``warm``, ``torch``.
``--ringcast-spin S``: ringcast's spin budget (as ``ringcast bench``'s option).
``--acks poll``: the writer polls the eventfd with ``sched_yield`` instead of blocking on it (what
``ringcast bench``'s writer does), to measure what the waiting writer's CPU use changes.
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import select
import subprocess
import sys
import time

from ..stress.stats import median
from .goals import remote_verdicts
from .heap import apply_heap, minor_faults
from .transports import FAMILY, PEER, REMOTE_FLOOR, make_writer, open_reader

__all__ = ["run_harness", "summarize", "table", "main", "IMPLS", "COUNTS"]

IMPLS = ("ringcast", "ringcast-poll", "arena", "vllm", "floor", "floor-arena", "remote", "remote-aes", "remote-insecure", "vllm-remote", "zmq-remote",
         "zmq-remote-curve", "zmq-remote-aes", "overflow",
         "vllm-overflow")
#: messages per batch
COUNTS = {"sched256": 300, "blob64k": 200, "dict1m": 60, "np1m": 60, "tensor64m": 8, "blob8m": 20, "blob16m": 12}
#: the cases of other families than local readers on the default ring: one TCP reader (or three)
#: on 127.0.0.1 (``remote``: CURVE, the default; ``remote-insecure``: ``remote_insecure=True``),
#: and local readers of a ring of 1 MiB chunks, where every message here overflows (``overflow``)
#: (:data:`.transports.FAMILY`; each ringcast implementation's vLLM peer: :data:`.transports.PEER`)
_FAMILY_PAYLOADS = {"remote": ("sched256", "blob64k", "dict1m", "np1m", "blob16m"), "overflow": ("dict1m", "blob8m")}
_TIMEOUT = 120.0
#: unmeasured messages at the start of each batch: one per chunk (10 for ringcast and vLLM)
_WARM = {"tensor64m": 4}
_VLLM_BUSY_S = 1.1  # vLLM's readers spin for 1 s (SpinCondition.busy_loop_s) after their last read


def applies(impl: str, payload: str) -> bool:
    """The 64 MiB tensor runs on the arena (and its floor) only; the rest on the others. The
    remote and overflow families run their own payloads (``_FAMILY_PAYLOADS``)."""
    if impl in FAMILY:
        return payload in _FAMILY_PAYLOADS[FAMILY[impl]]
    if payload in ("blob8m", "blob16m"):
        return False
    if impl in ("arena", "floor-arena"):
        return payload == "tensor64m"
    if impl in ("ringcast", "ringcast-poll", "floor"):
        return payload != "tensor64m"
    return True


def _open_writer(impl: str, n: int, loader, spin: float | None = None):
    """``(send, reader_infos, connect, close)`` of ``impl``'s writer: :mod:`.transports`' writer
    of the same name (the code ``ringcast bench`` runs), but ``floor-arena``."""
    if impl == "floor-arena":
        from .floor import FloorWriter

        w = FloorWriter(n, 72 << 20, 3)
        return w.send, [w.handle()] * n, w.wait_attached, w.close
    w = make_writer(impl, spin, loader)
    try:
        info = w.prepare(n)
        return w.send, [w.reader_info(info, i) for i in range(n)], w.connect, w.close
    except BaseException:
        w.close()
        raise


def _open_reader(impl: str, info, index: int):
    """``(recv, close)`` of reader ``index``; returns once attached."""
    if impl == "floor-arena":
        from .floor import FloorReader

        r = FloorReader(*info, index, view=True)
        return r.recv, r.close
    return open_reader(impl, info, index)


def _reader_main(impl, info, index, efd_dup, conn, heap) -> None:
    efd = efd_dup.detach()
    apply_heap(heap)
    recv, close = _open_reader(impl, info, index)
    mono, ack = time.monotonic_ns, os.eventfd_write
    lat: list[int] = []
    flt: list[int] = []  # minor page faults inside each receive (getrusage: the reader's allocator state)
    try:
        while True:
            f0 = minor_faults()
            m = recv()
            t = mono()
            k = m[0]
            if k == "d":
                flt.append(minor_faults() - f0)
                lat.append(t - m[2])
            elif k == "begin":
                lat, flt = [], []
            elif k == "end":
                conn.send((lat, flt))
                continue
            elif k == "stop":
                break
            del m
            ack(efd, 1)
    finally:
        close()
        conn.close()


def _wait_acks(efd: int, n: int, procs, poll: bool = False) -> None:
    """Block on the eventfd until ``n`` acks came; ``poll``: look without blocking, ``sched_yield``
    between looks (what ``ringcast bench``'s writer does with its shared-memory counters)."""
    got = 0
    if poll:
        deadline = time.monotonic() + _TIMEOUT
        while got < n:
            try:
                got += os.eventfd_read(efd)
            except BlockingIOError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"harness: {n - got} of {n} readers did not acknowledge in {_TIMEOUT:.0f} s") from None
                os.sched_yield()
        return
    while got < n:
        if not select.select([efd], [], [], _TIMEOUT)[0]:
            dead = [p.name for p in procs if not p.is_alive()]
            raise TimeoutError(f"harness: {n - got} of {n} readers did not acknowledge in {_TIMEOUT:.0f} s (dead: {dead})")
        got += os.eventfd_read(efd)


def _p50(xs: list) -> float:
    xs = sorted(xs)
    return xs[len(xs) // 2]


def _writer_main(impl: str, n: int, conn, loader, heap: str, poll: bool = False, spin: float | None = None) -> None:
    from multiprocessing.reduction import DupFd

    from .cases import make_payload

    apply_heap(heap)
    ctx = mp.get_context("spawn")
    efd = os.eventfd(0, os.EFD_NONBLOCK if poll else 0)
    send, infos, connect, close = _open_writer(impl, n, loader, spin)
    procs, conns = [], []
    payloads: dict = {}
    try:
        for i in range(n):
            r, w = ctx.Pipe(duplex=False)
            p = ctx.Process(target=_reader_main, args=(impl, infos[i], i, DupFd(efd), w, heap), name=f"harness-{impl}-r{i}", daemon=True)
            p.start()
            w.close()
            procs.append(p)
            conns.append(r)
        connect()
        conn.send({"ready": impl})
        mono = time.monotonic_ns
        while True:
            cmd = conn.recv()
            if cmd[0] == "stop":
                break
            _, name, count, flood = cmd
            payload = payloads.get(name)
            if payload is None:
                payload = payloads[name] = make_payload(name)
            send(("begin",))
            _wait_acks(efd, n, procs, poll)
            for _ in range(_WARM.get(name, 10)):  # every chunk/slot touched once: measure the steady state
                send(("w", 0, 0, payload))
                _wait_acks(efd, n, procs, poll)
            enq, flt = [], []
            t0 = mono()
            for seq in range(count):
                f0 = minor_faults()
                t = mono()
                send(("d", seq, t, payload))
                t1 = mono()
                flt.append(minor_faults() - f0)
                enq.append(t1 - t)
                if not flood:
                    _wait_acks(efd, n, procs, poll)
            if flood:  # back to back; the time until every reader has the last, per message
                _wait_acks(efd, n * count, procs, poll)
                per_msg = (mono() - t0) / count
            send(("end",))
            lat, rflt, per_reader = [], [], []
            for c in conns:
                if not c.poll(_TIMEOUT):
                    raise TimeoutError(f"harness: a {impl} reader sent no result")
                a, b = c.recv()
                lat.extend(a)
                per_reader.append(a)
                rflt.extend(b)
            # per message, the time until the last reader had it (every reader gets every message)
            last = [max(col) for col in zip(*per_reader)]
            conn.send({"p50_us": (per_msg if flood else _p50(lat)) / 1e3, "all_p50_us": (per_msg if flood else _p50(last)) / 1e3,
                       "enqueue_p50_us": _p50(enq) / 1e3, "faults_p50": _p50(flt),
                       "faults_mean": sum(flt) / len(flt), "reader_faults_mean": sum(rflt) / len(rflt), "reader_faults_p50": _p50(rflt)})
    except BaseException as e:
        conn.send({"error": f"{type(e).__name__}: {e}"})
    finally:
        try:
            send(("stop",))
        except Exception:
            pass
        for p in procs:
            p.join(10.0)
            if p.is_alive():
                p.kill()
                p.join(2.0)
        close()
        os.close(efd)


def _load() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def run_harness(payloads, readers=(1, 3), impls=IMPLS, *, repeats: int = 3, scale: float = 1.0, loader=None, heap: str = "clean", acks: str = "block", progress=True, mode: str = "pingpong", spin: float | None = None) -> dict:
    """Run every (readers, payload, impl) ``repeats`` times, interleaved; see the module doc.
    ``mode="flood"``: each batch is sent back to back, and ``p50_us`` is the time per message
    until every reader has the last one (throughput: 1e6 / p50_us messages per second)."""
    ctx = mp.get_context("spawn")
    if loader is not None:
        loader = os.path.abspath(loader) if os.path.isfile(loader) else loader
    impls = [i for i in impls if not i.startswith("vllm") or loader is not None]
    raw: dict = {}
    loads: list = []
    t0 = time.monotonic()

    def say(msg):
        if progress:
            print(f"[{time.monotonic() - t0:6.1f}s] {msg}", file=sys.stderr, flush=True)

    for n in readers:
        live = [i for i in impls if any(applies(i, p) for p in payloads)]
        writers: dict = {}
        try:
            for impl in live:
                a, b = ctx.Pipe()
                p = ctx.Process(target=_writer_main, args=(impl, n, b, loader, heap, acks == "poll", spin), name=f"harness-{impl}-w")  # not a daemon: it starts its readers
                p.start()
                b.close()
                writers[impl] = (p, a)
                if not a.poll(_TIMEOUT):
                    raise TimeoutError(f"harness: the {impl} writer did not start")
                r = a.recv()
                if "error" in r:
                    raise RuntimeError(f"harness: {impl} with {n} readers: {r['error']}")
            say(f"{n} reader(s): writers {', '.join(writers)} ready; load average {_load()}")
            loads.append({"readers": n, "when": "start", "loadavg": _load()})
            for rep in range(repeats):
                for ci, name in enumerate(payloads):
                    order = [i for i in live if applies(i, name)]
                    if (rep + ci) % 2:
                        order.reverse()
                    for impl in order:
                        count = max(5, int(COUNTS[name] * scale))
                        p, a = writers[impl]
                        a.send(("run", name, count, mode == "flood"))
                        if not a.poll(_TIMEOUT * 2):
                            raise TimeoutError(f"harness: {impl} {name} {n}r gave no result")
                        r = a.recv()
                        if "error" in r:
                            raise RuntimeError(f"harness: {impl} {name} {n}r: {r['error']}")
                        key = f"{name}/{n}r" + (f"/{FAMILY[impl]}" if impl in FAMILY else "")
                        raw.setdefault(key, {}).setdefault(impl, []).append(r)
                        if impl.startswith("vllm"):
                            time.sleep(_VLLM_BUSY_S)  # let its readers stop spinning first
                say(f"{n} reader(s): repeat {rep + 1}/{repeats} done; load average {_load()}")
            loads.append({"readers": n, "when": "end", "loadavg": _load()})
        finally:
            for p, a in writers.values():
                try:
                    a.send(("stop",))
                except OSError:
                    pass
            for p, a in writers.values():
                p.join(30.0)
                if p.is_alive():
                    p.kill()
                    p.join(5.0)
                a.close()
    try:
        uptime = subprocess.run(["uptime"], capture_output=True, text=True, timeout=5).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        uptime = None
    return {"heap": heap, "acks": acks, "mode": mode, "ringcast_spin": spin, "repeats": repeats, "scale": scale, "raw": raw, "loadavg": loads, "uptime_at_end": uptime,
            "wall_s": round(time.monotonic() - t0, 1), "summary": summarize(raw), "verdicts": verdicts(summarize(raw))}


def verdicts(summary: dict) -> list[dict]:
    """Issue 53's goals (:func:`.goals.remote_verdicts`) on this harness's summary."""
    keys = {"p50": "p50_us", "writer_faults": "faults_p50", "reader_faults": "reader_faults_p50"}

    def get(payload, n, impl, metric):
        return summary.get(f"{payload}/{n}r/remote", {}).get("impls", {}).get(impl, {}).get(keys[metric])

    return remote_verdicts(get)


_KEYS = ("p50_us", "all_p50_us", "enqueue_p50_us", "faults_p50", "faults_mean", "reader_faults_mean", "reader_faults_p50")


def summarize(raw: dict) -> dict:
    """Per case and impl the median over repeats; ``ratios``: ringcast (or arena) over vLLM and
    over the floor (or floor-arena), of those medians; in the remote and overflow families each
    ringcast implementation over its vLLM peer (``PEER``), as ``"<impl>/<peer>"`` (one-way) and
    ``"<impl>/<peer> all"`` (until the last reader had it), and each remote one over the remote
    floor (:data:`.transports.REMOTE_FLOOR`: ``zmq-remote``, ``zmq-remote-curve``, ``zmq-remote-aes``),
    ``"<impl>/<floor>"``."""
    out: dict = {}
    for case, per in raw.items():
        s = {impl: {k: median([r[k] for r in rs]) for k in _KEYS if all(k in r for r in rs)} for impl, rs in per.items()}
        rc = s.get("ringcast") or s.get("arena")
        fl = s.get("floor") or s.get("floor-arena")
        ratios = {}
        if rc and "vllm" in s:
            ratios["rc/vllm"] = rc["p50_us"] / s["vllm"]["p50_us"]
            ratios["rc/vllm all"] = rc["all_p50_us"] / s["vllm"]["all_p50_us"]
        if rc and fl:
            ratios["rc/floor"] = rc["p50_us"] / fl["p50_us"]
        for impl in s:
            if impl in FAMILY and PEER.get(impl) in s:
                ratios[f"{impl}/{PEER[impl]}"] = s[impl]["p50_us"] / s[PEER[impl]]["p50_us"]
                ratios[f"{impl}/{PEER[impl]} all"] = s[impl]["all_p50_us"] / s[PEER[impl]]["all_p50_us"]
            if REMOTE_FLOOR.get(impl) in s:
                ratios[f"{impl}/{REMOTE_FLOOR[impl]}"] = s[impl]["p50_us"] / s[REMOTE_FLOOR[impl]]["p50_us"]
        out[case] = {"impls": s, "ratios": ratios}
    return out


def table(result: dict) -> str:
    """A markdown table of :func:`summarize`'s output."""
    head = ("| case | impl | one-way p50 us | all readers p50 us | enqueue p50 us | writer faults/msg (p50, mean) | reader faults/msg (mean) "
            "| ringcast / vLLM | ringcast / vLLM, all readers | ringcast / floor |")
    lines = [head, "|" + "---|" * 10]
    for case, st in result["summary"].items():
        for k, (impl, v) in enumerate(st["impls"].items()):
            rat = st["ratios"] if k == 0 else {}
            r1 = f"{rat['rc/vllm']:.2f}" if "rc/vllm" in rat else ""
            if impl in FAMILY and f"{impl}/{PEER.get(impl)}" in st["ratios"]:
                r1 = f"{st['ratios'][f'{impl}/{PEER[impl]}']:.2f}"
            r2 = f"{rat['rc/floor']:.2f}" if "rc/floor" in rat else ""
            if f"{impl}/{REMOTE_FLOOR.get(impl)}" in st["ratios"]:
                r2 = f"{st['ratios'][f'{impl}/{REMOTE_FLOOR[impl]}']:.2f}"
            ra = f"{rat['rc/vllm all']:.2f}" if "rc/vllm all" in rat else ""
            if impl in FAMILY and f"{impl}/{PEER.get(impl)} all" in st["ratios"]:
                ra = f"{st['ratios'][f'{impl}/{PEER[impl]} all']:.2f}"
            lines.append(f"| {case} | {impl} | {v['p50_us']:.1f} | {v['all_p50_us']:.1f} | {v['enqueue_p50_us']:.1f} | {v['faults_p50']:.0f}, {v['faults_mean']:.1f} "
                         f"| {v['reader_faults_mean']:.1f} | {r1} | {ra} | {r2} |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m ringcast_lab.bench.harness", description=__doc__.split("\n\n")[0])
    ap.add_argument("--payload", action="append", choices=list(COUNTS), help="default: all")
    ap.add_argument("--readers", action="append", type=int, help="default: 1 and 3")
    ap.add_argument("--impl", action="append", choices=IMPLS, help="default: all (vllm only with --vllm-loader)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--scale", type=float, default=1.0, help="messages per batch x this")
    ap.add_argument("--heap", default="clean", choices=["clean", "warm", "torch"])
    ap.add_argument("--acks", default="block", choices=["block", "poll"], help="the writer blocks on the eventfd (default) or polls it with sched_yield, as ringcast bench's writer does")
    ap.add_argument("--mode", default="pingpong", choices=["pingpong", "flood"], help="flood: back to back; the one-way column is then the time per message until every reader has the last")
    ap.add_argument("--ringcast-spin", type=float, help="the ringcast wait policy's spin budget in seconds (default: the library's), as ringcast bench's option")
    ap.add_argument("--vllm-loader")
    ap.add_argument("--out", help="write the JSON result here")
    a = ap.parse_args(argv)
    res = run_harness(a.payload or list(COUNTS), tuple(a.readers or (1, 3)), tuple(a.impl or IMPLS), repeats=a.repeats, scale=a.scale, loader=a.vllm_loader, heap=a.heap, acks=a.acks, mode=a.mode, spin=a.ringcast_spin)
    print(table(res))
    for v in res["verdicts"]:
        print(f"[{'met' if v['met'] else 'MISSED'}] {v['goal']}: {v['measured']}")
    print(f"heap={res['heap']} acks={res['acks']} repeats={res['repeats']} load averages {res['loadavg']}; {res['uptime_at_end']}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
