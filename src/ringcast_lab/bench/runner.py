"""Interleaved benchmark runner.

For each reader count, every transport's readers are started once and stay alive; then for
each case and each round, every transport runs one batch, in alternating order (A B C, C B A,
...), so slow drift of the machine (other tenants, thermal, frequency) hits all of them alike.
Per case and transport the result is the median over rounds of each batch's statistic, and the
comparison is the ratio of those medians.

Protocol over each transport (tuples, pickled by the transport):
``("begin", ack, seq)``, ``("d", seq, t_send_ns, payload)``, ``("end",)``, ``("stop",)``.
Readers acknowledge by storing the sequence number in their slot of a shared array; results go
back over a separate pipe per reader.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import pickle
import signal
import sys
import time
import traceback

from ..stress.stats import median
from .cases import BASE, Case, family_of, make_payload
from .goals import evaluate_goals
from .heap import minor_faults, warm_allocator
from .transports import PEER, REMOTE_FLOOR, make_writer, open_reader

__all__ = ["run_bench", "bench_reader_main", "summarize"]

_BATCH_TIMEOUT = 120.0


def bench_reader_main(name: str, info, index: int, ack, conn) -> None:
    """Entry point of a benchmark reader process."""
    close = None
    try:
        warm_allocator()  # the same allocator state in every bench process (see .heap)
        recv, close = open_reader(name, info, index)
        mono_ns = time.monotonic_ns
        lat: list[int] = []
        count = 0
        t_last = None
        do_ack = False
        cpu0 = wall0 = 0.0
        flt: list[int] = []  # minor page faults inside each receive (the reader's allocator state)
        while True:
            f0 = minor_faults()
            m = recv()
            t = mono_ns()
            k = m[0]
            if k == "d":
                flt.append(minor_faults() - f0)
                lat.append(t - m[2])
                count += 1
                t_last = t
                seq = m[1]
                del m  # freed now, not inside the next message's timed interval (m = recv())
                if do_ack:
                    ack[index] = seq
            elif k == "begin":
                lat, flt = [], []
                count = 0
                t_last = None
                do_ack = m[1]
                cpu0, wall0 = time.process_time(), time.monotonic()
                ack[index] = m[2]
            elif k == "end":
                conn.send({"lat": lat, "faults": flt, "count": count, "t_last": t_last, "cpu": time.process_time() - cpu0, "wall": time.monotonic() - wall0})
            elif k == "stop":
                break
    except BaseException as e:
        try:
            conn.send({"error": f"{type(e).__name__}: {e}", "traceback": traceback.format_exc()})
        except Exception:
            pass
    finally:
        if close is not None:
            try:
                close()
            except Exception:
                pass
        conn.close()


def _fits(g: "_Group", case: Case, payload, sizes: dict) -> bool:
    """Does the case's message fit the transport (its writer's ``capacity``, None: no limit)?
    ``sizes`` caches the pickled size per payload name."""
    cap = getattr(g.writer, "capacity", None)
    if cap is None:
        return True
    if case.payload not in sizes:
        sizes[case.payload] = len(pickle.dumps(("d", 0, 0, payload), protocol=5))
    return sizes[case.payload] <= cap


WARM_LAP = 12  # untimed messages of a case's payload before its rounds: more than a ring's chunks (10)


def _warm_payload(groups: dict, case: Case, payload, sizes: dict, warmed: set, errors: list, names: list | None = None) -> None:
    """Before the first timed round of a payload, every group (of ``names``: the case's family)
    sends it ``WARM_LAP`` times, untimed:
    each ring chunk (or arena slot) has then held one, so the rounds measure the steady state,
    not the first touch of the shared memory (page faults; ringcast's memory on use reserves each
    chunk's bytes then). Without it a ``--quick`` run's two rounds of a 1 MiB case averaged a
    first lap of ~170 faults per message into the median (85 per message in every impl)."""
    if case.payload == "none" or (case.family, case.payload) in warmed:
        return
    warmed.add((case.family, case.payload))
    lap = Case(case.payload, case.readers, "hot", WARM_LAP)
    for name in list(groups) if names is None else names:
        g = groups.get(name)
        if g is not None and _fits(g, case, payload, sizes):
            _run_only(groups, g)
            try:
                g.batch(lap, payload)
            except Exception as e:
                errors.append(f"{name} {case.payload} warm-up lap: {type(e).__name__}: {e}")
                g.close()
                groups.pop(name, None)


def _proc_state(pid: int) -> str:
    """The state letter of ``pid`` in /proc ("T": stopped, "Z": exited), "X" if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return "X"


def _run_only(groups: dict, g: "_Group | None") -> None:
    """Let only ``g``'s readers run (None: none), see :meth:`_Group.pause`."""
    for other in groups.values():
        if other is not g:
            other.pause(True)
    if g is not None:
        g.pause(False)


class _Group:
    """One transport's writer and its N live readers."""

    def __init__(self, name: str, n: int, ctx, spin: float | None = None, vllm_loader: str | None = None) -> None:
        self.name = name
        self.n = n
        self.seq = 0
        self.paused = False
        self.procs: list = []
        self.conns: list = []
        self.writer = make_writer(name, spin, vllm_loader)
        self.ack = ctx.RawArray("q", n)
        info = self.writer.prepare(n)
        try:
            for i in range(n):
                r, w = ctx.Pipe(duplex=False)
                p = ctx.Process(
                    target=bench_reader_main,
                    args=(name, self.writer.reader_info(info, i), i, self.ack, w),
                    name=f"ringcast-bench-{name}-r{i}",
                    daemon=True,
                )
                p.start()
                w.close()
                self.procs.append(p)
                self.conns.append(r)
            self.writer.connect()
        except BaseException:
            self.close()
            raise

    def pause(self, paused: bool) -> None:
        """Stop (SIGSTOP) or continue (SIGCONT) this group's reader processes. The runner keeps
        every group but the one it measures stopped: idle readers of some transports spin (vLLM's
        use a whole core each while nothing arrives), and on 2 cores they would take the CPU
        from the transport being measured, differently from run to run."""
        if paused == self.paused:
            return
        live = [p.pid for p in self.procs if p.is_alive()]
        for pid in live:
            os.kill(pid, signal.SIGSTOP if paused else signal.SIGCONT)
        deadline = time.monotonic() + 10.0
        for pid in live:  # signals arrive asynchronously: return once each reader is (un)stopped
            while time.monotonic() < deadline:
                state = _proc_state(pid)
                if state in ("X", "Z") or (state == "T") == paused:
                    break
                os.sched_yield()
        self.paused = paused

    def _wait_acks(self, seq: int, deadline: float) -> None:
        ack = self.ack
        yield_ = os.sched_yield
        k = 0
        while True:
            for j in range(self.n):
                if ack[j] < seq:
                    break
            else:
                return
            k += 1
            if k & 1023 == 0:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{self.name}: readers did not acknowledge message {seq} in time")
                for p in self.procs:
                    if not p.is_alive():
                        raise RuntimeError(f"{self.name}: reader {p.name} died (exit code {p.exitcode})")
            yield_()

    def batch(self, case: Case, payload) -> dict:
        deadline = time.monotonic() + _BATCH_TIMEOUT
        send = self.writer.send
        mono_ns = time.monotonic_ns
        self.seq += 1
        send(("begin", case.mode in ("hot", "idle"), self.seq))
        self._wait_acks(self.seq, deadline)
        t0 = mono_ns()
        enq: list[int] = []
        flt: list[int] = []
        if case.mode == "hot":
            for _ in range(case.count):
                self.seq += 1
                f0 = minor_faults()
                t = mono_ns()
                send(("d", self.seq, t, payload))
                enq.append(mono_ns() - t)  # the writer's time in send (enqueue)
                flt.append(minor_faults() - f0)  # the allocator's state shows here (see .heap)
                self._wait_acks(self.seq, deadline)
        elif case.mode == "idle":
            for _ in range(case.count):
                self.seq += 1
                send(("d", self.seq, mono_ns(), payload))
                time.sleep(0.001)
                self._wait_acks(self.seq, deadline)
        elif case.mode == "flood":
            for _ in range(case.count):
                self.seq += 1
                send(("d", self.seq, mono_ns(), payload))
        else:  # silent
            time.sleep(case.duration)
        send(("end",))
        res = []
        for i, c in enumerate(self.conns):
            if not c.poll(max(0.0, deadline - time.monotonic())):
                raise TimeoutError(f"{self.name}: reader {i} sent no result")
            r = c.recv()
            if "error" in r:
                raise RuntimeError(f"{self.name} reader {i}: {r['error']}")
            res.append(r)
        out: dict = {}
        cpu = [r["cpu"] / r["wall"] for r in res if r["wall"] > 0]
        out["reader_cpu_max"] = max(cpu) if cpu else None
        out["reader_cpu_mean"] = sum(cpu) / len(cpu) if cpu else None
        if case.mode in ("hot", "idle"):
            out.update(_lat_stats([x for r in res for x in r["lat"]]))
            rflt = [x for r in res for x in r["faults"]]
            out["reader_faults_mean"] = sum(rflt) / len(rflt) if rflt else None
            out["reader_faults_p50"] = sorted(rflt)[len(rflt) // 2] if rflt else None
            if enq:
                out["enqueue_p50_us"] = _lat_stats(enq)["p50_us"]
                out["enqueue_faults_mean"] = sum(flt) / len(flt)
                out["enqueue_faults_p50"] = sorted(flt)[len(flt) // 2]
        elif case.mode == "flood":
            last = max(r["t_last"] or t0 for r in res)
            if any(r["count"] != case.count for r in res):
                raise RuntimeError(f"{self.name}: flood lost messages: {[r['count'] for r in res]} of {case.count}")
            out["msgs_per_s"] = case.count / max(1e-9, (last - t0) / 1e9)
        return out

    def close(self) -> None:
        self.pause(False)
        try:
            if all(p.is_alive() for p in self.procs) and self.procs:
                self.writer.send(("stop",))
        except Exception:
            pass
        for p in self.procs:
            p.join(10.0)
        for p in self.procs:
            if p.is_alive():
                p.terminate()
                p.join(2.0)
                if p.is_alive():
                    p.kill()
                    p.join(2.0)
        for c in self.conns:
            c.close()
        self.writer.close()


def _pickle_batch(case: Case, payload) -> dict:
    lat = []
    dumps, loads, now = pickle.dumps, pickle.loads, time.perf_counter_ns
    for i in range(case.count):
        msg = ("d", i, time.monotonic_ns(), payload)
        t0 = now()
        loads(dumps(msg, protocol=5))
        lat.append(now() - t0)
    return _lat_stats(lat)


def _lat_stats(lat: list[int]) -> dict:
    lat.sort()
    return {"p50_us": lat[len(lat) // 2] / 1e3, "p99_us": lat[min(len(lat) - 1, int(len(lat) * 0.99))] / 1e3}


def _memcpy_batch(case: Case, payload) -> dict:
    """The floor of a one-copy transport: the message's pickled bytes (and out-of-band buffers)
    copied once into a preallocated, already touched buffer, in this process."""
    bufs: list = []
    main = pickle.dumps(("d", 0, 0, payload), protocol=5, buffer_callback=bufs.append)
    srcs = [memoryview(main), *(b.raw() for b in bufs)]
    dst = memoryview(bytearray(sum(m.nbytes for m in srcs)))
    spans = []
    off = 0
    for m in srcs:
        spans.append((off, off + m.nbytes, m))
        off += m.nbytes
    lat = []
    now = time.perf_counter_ns
    for _ in range(case.count):
        t0 = now()
        for a, b, m in spans:
            dst[a:b] = m
        lat.append(now() - t0)
    return _lat_stats(lat)


_BASELINES = {"pickle": _pickle_batch, "memcpy": _memcpy_batch}
_METRICS = ("p50_us", "p99_us", "enqueue_p50_us", "enqueue_faults_mean", "reader_faults_mean", "enqueue_faults_p50", "reader_faults_p50",
            "msgs_per_s", "reader_cpu_max", "reader_cpu_mean")


def summarize(cases: list[Case], raw: dict) -> dict:
    """Per case and implementation the median over rounds of each metric (``raw``: case name ->
    implementation -> one dict per round), with ``vs_ringcast``: how many times the family's base
    (:data:`.cases.BASE`: ``ringcast``; remote cases: ``remote``, the default) this one's latency
    and time per flooded message are, and for a ringcast implementation ``vs_vllm``: how many
    times its vLLM peer's (:data:`.transports.PEER`) they are, and for a remote mode ``vs_floor``:
    how many times its floor's (:data:`.transports.REMOTE_FLOOR`)."""
    summary: dict[str, dict] = {}
    for case in cases:
        per = {}
        for name, rs in raw[case.name].items():
            per[name] = {m: median([x[m] for x in rs if x.get(m) is not None]) for m in _METRICS}
            per[name]["rounds"] = len(rs)
        base = per.get(BASE[case.family], {})
        for name, st in per.items():
            st["vs_ringcast"] = _times(st, base)  # > 1: ringcast (remote: its default) is that many times faster
            if name in PEER and PEER[name] in per:
                st["vs_vllm"] = _times(st, per[PEER[name]])  # < 1: this ringcast implementation is faster than vLLM's
            if REMOTE_FLOOR.get(name) in per:
                st["vs_floor"] = _times(st, per[REMOTE_FLOOR[name]])  # a remote mode over its floor (issue 53): >= 1
        summary[case.name] = {"case": {"payload": case.payload, "readers": case.readers, "mode": case.mode, "count": case.count, "duration": case.duration,
                                       "family": case.family}, "impls": per}
    return summary


def _times(st: dict, base: dict) -> dict:
    """How many times ``st``'s latency (p50, p99) and time per flooded message are ``base``'s."""
    ratio = {m: st[m] / base[m] for m in ("p50_us", "p99_us") if st.get(m) and base.get(m)}
    if st.get("msgs_per_s") and base.get("msgs_per_s"):
        ratio["msgs_per_s"] = base["msgs_per_s"] / st["msgs_per_s"]
    return ratio


def run_bench(
    cases: list[Case],
    impls: dict,
    *,
    rounds: int = 5,
    quick: bool = False,
    progress: bool = True,
    spin: float | None = None,
    vllm_loader: str | None = None,
) -> dict:
    """``vllm_loader``: where the ``vllm`` implementation's MessageQueue comes from
    (:func:`.transports.load_message_queue_class`; None: an installed vLLM)."""
    import platform

    # glibc's mmap threshold follows the largest chunk this process freed so far: without this the
    # writer's state depended on the bench's own history (vLLM's dict1m enqueue then mapped and
    # faulted 1.1 MiB per message, ~4x its time elsewhere). See .heap and docs/performance.md.
    warm_allocator()
    ctx = mp.get_context("spawn")
    names = [n for n in ("ringcast", "ringcast-poll", "arena", "vllm", "zmq", "pipe", "torch", "floor", "remote", "remote-aes", "remote-insecure", "vllm-remote",
                           "zmq-remote", "zmq-remote-curve", "zmq-remote-aes") if n in impls]
    raw: dict[str, dict[str, list]] = {c.name: {} for c in cases}
    errors: list[str] = []
    payloads: dict[str, object] = {}
    sizes: dict[str, int] = {}  # pickled size per payload, for transports with a capacity
    t_start = time.monotonic()

    def say(msg: str) -> None:
        if progress:
            print(f"[{time.monotonic() - t_start:6.1f}s] {msg}", file=sys.stderr, flush=True)

    for n in sorted({c.readers for c in cases}):
        group_cases = [c for c in cases if c.readers == n]
        groups: dict[str, _Group] = {}
        warmed: set = set()  # (family, payload) every group of this reader count has sent a lap of
        families = {c.family for c in group_cases}
        try:
            for name in (x for x in names if family_of(x) in families):
                say(f"starting {name} with {n} reader(s)")
                _run_only(groups, None)
                try:
                    g = _Group(name, n, ctx, spin, vllm_loader)
                    groups[name] = g
                    warm = Case("sched256", n, "hot", 20)
                    g.batch(warm, make_payload("sched256"))
                except Exception as e:
                    errors.append(f"{name} ({n} readers): setup failed: {type(e).__name__}: {e}")
                    groups.pop(name, None)
            for case in group_cases:
                if case.payload != "none" and case.payload not in payloads:
                    payloads[case.payload] = make_payload(case.payload)
                payload = payloads.get(case.payload)
                mine = [x for x in groups if family_of(x) == case.family]
                baselines = case.mode == "hot" and case.family == "local"
                say(f"{case.name}: {rounds} round(s) x {', '.join(mine)}" + (" + pickle, memcpy" if baselines else ""))
                _warm_payload(groups, case, payload, sizes, warmed, errors, mine)
                for r in range(rounds):
                    order = mine if r % 2 == 0 else mine[::-1]
                    if baselines:
                        order[len(order) // 2 : len(order) // 2] = list(_BASELINES)
                    for name in order:
                        if name in _BASELINES:
                            _run_only(groups, None)
                            raw[case.name].setdefault(name, []).append(_BASELINES[name](case, payload))
                            continue
                        g = groups.get(name)
                        if g is None or not _fits(g, case, payload, sizes):
                            continue
                        _run_only(groups, g)
                        try:
                            raw[case.name].setdefault(name, []).append(g.batch(case, payload))
                        except Exception as e:
                            errors.append(f"{name} {case.name}: {type(e).__name__}: {e}")
                            g.close()
                            groups.pop(name, None)
        finally:
            for g in groups.values():
                g.close()
    summary = summarize(cases, raw)
    return {
        "rounds": rounds,
        "quick": quick,
        "ringcast_spin": spin,
        "vllm_loader": vllm_loader,
        "impls": names,
        "host": {"cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "wall_s": round(time.monotonic() - t_start, 1),
        "cases": summary,
        "raw": raw,
        "errors": errors,
        "goals": evaluate_goals(summary),
    }
