"""The per-message cost of the remote path, counted (issue 53): not timed, so the machine's load
does not move it.

    python tools/bench_remote_cost.py [--impl remote --impl zmq-remote ...] [--payload sched256 ...] [--messages 1000]

For each implementation (``ringcast bench``'s transports: ``remote`` CURVE, ``remote-aes``,
``remote-insecure``, and the floors ``zmq-remote``, ``zmq-remote-curve``, ``zmq-remote-aes``) and
payload, a writer (this process) and one reader process play ping-pong over TCP on 127.0.0.1 (the
reader acknowledges each message on an eventfd, as the second harness's readers do), and each
side counts, over ``--messages`` messages after 200 unmeasured ones:

* **Python calls** per message in the writer's ``send`` (``enqueue``) and the reader's ``recv``
  (``dequeue``): cProfile's call count, functions and C builtins alike (pyzmq's Cython methods are
  not seen by it; each ``socket.send`` / ``recv`` is one of those);
* **syscalls** per message (``perf stat -e raw_syscalls:sys_enter``), in the side's main thread
  and in its other threads (ZeroMQ's I/O threads) apart, the harness's own acknowledgement taken
  off (writer: one ``select`` and one ``read`` of the eventfd, reader: one ``write``);
* **page faults** per message (``page-faults``), every thread;
* **CPU time** per message of the side's main thread in ``send`` / ``recv`` (``time.thread_time_ns``:
  the thread's own CPU, not its waits; a third pass with neither the profiler nor perf's probes);
* **allocations** per message: calls of ``PyObject_Malloc`` (Python objects) and of libc's
  ``malloc`` (buffers, ZeroMQ's messages), every thread, through uprobes this tool adds with
  ``perf probe`` (root; left out, with a note, where that fails).

Counts hold under load; a few syscalls per message move with timing (a poll that finds the
message already there skips the wait). The tool needs ``perf``; without it only the calls.
"""

from __future__ import annotations

import argparse
import cProfile
import json
import multiprocessing as mp
import os
import pstats
import select
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
import time

from ringcast_lab.bench.cases import make_payload
from ringcast_lab.bench.transports import make_writer, open_reader

IMPLS = ("zmq-remote", "remote-insecure", "zmq-remote-curve", "remote", "zmq-remote-aes", "remote-aes")
_ACK_SYSCALLS = {"writer": 2, "reader": 1}  # the harness's eventfd: select + read, write
_WARM = 200


def _probes() -> list[str]:
    """The perf events to count; the uprobes for the allocators are added once (root)."""
    events = ["raw_syscalls:sys_enter", "page-faults"]
    have = subprocess.run(["perf", "probe", "-l"], capture_output=True, text=True).stdout
    libpython = os.path.join(sysconfig.get_config_var("LIBDIR") or "", sysconfig.get_config_var("LDLIBRARY") or "")
    for lib, fn, ev in (("/lib/x86_64-linux-gnu/libc.so.6", "malloc", "probe_libc:malloc"),
                        (libpython, "PyObject_Malloc", "probe_libpython3:PyObject_Malloc")):
        if ev.split(":")[1] not in have and os.path.exists(lib):
            subprocess.run(["perf", "probe", "-q", "-x", lib, fn], capture_output=True)
            have = subprocess.run(["perf", "probe", "-l"], capture_output=True, text=True).stdout
        if ev.split(":")[1] in have:
            events.append(ev)
    return events


class _Perf:
    """``perf stat --per-thread`` on this process from :meth:`start` to :meth:`stop`."""

    def __init__(self, events: list[str]) -> None:
        self.events = events
        self.out = tempfile.NamedTemporaryFile(prefix="ringcast-cost-", suffix=".csv", delete=False).name

    def start(self) -> None:
        self.p = subprocess.Popen(["perf", "stat", "-x,", "--per-thread", "-e", ",".join(self.events), "-p", str(os.getpid()), "-o", self.out],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)  # attached

    def stop(self) -> dict:
        """``{event: (main thread, other threads)}``."""
        self.p.send_signal(signal.SIGINT)
        self.p.wait(30)
        out: dict = {}
        with open(self.out) as f:
            for line in f:
                cols = line.strip().split(",")
                if len(cols) < 4 or not cols[0] or cols[0].startswith("#"):
                    continue
                tid = int(cols[0].rsplit("-", 1)[1])
                try:
                    n = int(cols[1])
                except ValueError:
                    continue
                main, other = out.get(cols[3], (0, 0))
                out[cols[3]] = (main + n, other) if tid == os.getpid() else (main, other + n)
        os.unlink(self.out)
        return out


def _calls(prof: cProfile.Profile) -> int:
    return sum(v[1] for v in pstats.Stats(prof).stats.values())


def _reader_main(impl, info, efd_dup, conn, events) -> None:
    efd = efd_dup.detach()
    recv, close = open_reader(impl, info, 0)
    perf = _Perf(events) if events else None
    prof, k, cpu = None, 0, None
    tt = time.thread_time_ns
    try:
        while True:
            if cpu is not None:
                t0 = tt()
                m = recv()
                cpu.append(tt() - t0)
            elif prof is not None:
                prof.enable()
                m = recv()
                prof.disable()
                k += 1
            else:
                m = recv()
            kind = m[0]
            if kind == "calls":
                prof, k = cProfile.Profile(), 0
            elif kind == "calls-end":
                conn.send({"calls": _calls(prof) / k})
                prof = None
            elif kind == "cpu":
                cpu = []
            elif kind == "cpu-end":
                conn.send({"cpu": sorted(cpu[:-1])[len(cpu[:-1]) // 2] / 1e3})
                cpu = None
            elif kind == "perf":
                perf.start()
            elif kind == "perf-end":
                conn.send({"perf": perf.stop()})
            elif kind == "stop":
                break
            del m
            os.eventfd_write(efd, 1)
    finally:
        close()


def _ack(efd: int) -> None:
    select.select([efd], [], [], 60)
    os.eventfd_read(efd)


def measure(impl: str, payload: str, n: int, events: list[str]) -> dict:
    from multiprocessing.reduction import DupFd

    ctx = mp.get_context("spawn")
    efd = os.eventfd(0)
    w = make_writer(impl)
    proc = None
    try:
        info = w.prepare(1)
        a, b = ctx.Pipe()
        proc = ctx.Process(target=_reader_main, args=(impl, w.reader_info(info, 0), DupFd(efd), b, events), daemon=True)
        proc.start()
        w.connect()
        body = make_payload(payload)
        send = w.send
        for i in range(_WARM):
            send(("w", i, 0, body))
            _ack(efd)
        out = {"impl": impl, "payload": payload, "messages": n}
        send(("calls",))
        _ack(efd)
        prof = cProfile.Profile()
        for i in range(n):
            m = ("d", i, 0, body)
            prof.enable()
            send(m)
            prof.disable()
            _ack(efd)
        send(("calls-end",))
        _ack(efd)
        out["writer_calls"] = _calls(prof) / n
        out["reader_calls"] = a.recv()["calls"]
        send(("cpu",))
        _ack(efd)
        tt, cpu = time.thread_time_ns, []
        for i in range(n):
            m = ("d", i, 0, body)
            t0 = tt()
            send(m)
            cpu.append(tt() - t0)
            _ack(efd)
        send(("cpu-end",))
        _ack(efd)
        out["writer_cpu_us"] = sorted(cpu)[n // 2] / 1e3
        out["reader_cpu_us"] = a.recv()["cpu"]
        if events:
            perf = _Perf(events)
            send(("perf",))
            _ack(efd)
            perf.start()
            for i in range(n):
                send(("d", i, 0, body))
                _ack(efd)
            wp = perf.stop()
            send(("perf-end",))
            _ack(efd)
            rp = a.recv()["perf"]
            for side, counts in (("writer", wp), ("reader", rp)):
                for ev, (main, other) in counts.items():
                    key = ev.split(":")[-1]
                    if key == "sys_enter":
                        out[f"{side}_syscalls_main"] = main / n - _ACK_SYSCALLS[side]
                        out[f"{side}_syscalls_other"] = other / n
                    else:
                        out[f"{side}_{key}"] = (main + other) / n
        send(("stop",))
        proc.join(10)
        return out
    finally:
        if proc is not None and proc.is_alive():
            proc.kill()
        w.close()
        os.close(efd)


_COLS = ("writer_cpu_us", "reader_cpu_us", "writer_calls", "reader_calls", "writer_syscalls_main", "writer_syscalls_other", "reader_syscalls_main", "reader_syscalls_other",
         "writer_page-faults", "reader_page-faults", "writer_PyObject_Malloc", "reader_PyObject_Malloc", "writer_malloc", "reader_malloc")


def table(rows: list[dict]) -> str:
    head = "| payload | impl | " + " | ".join(c.replace("_", " ") for c in _COLS) + " |"
    lines = [head, "|" + "---|" * (len(_COLS) + 2)]
    for r in rows:
        lines.append(f"| {r['payload']} | {r['impl']} | " + " | ".join("-" if r.get(c) is None else f"{r[c]:.1f}" for c in _COLS) + " |")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--impl", action="append", choices=IMPLS)
    ap.add_argument("--payload", action="append", choices=("sched256", "blob64k", "dict1m", "np1m"))
    ap.add_argument("--messages", type=int, default=1000)
    ap.add_argument("--no-perf", action="store_true")
    ap.add_argument("--out")
    a = ap.parse_args(argv)
    events = [] if a.no_perf or not shutil.which("perf") else _probes()
    rows = []
    for payload in a.payload or ("sched256", "blob64k"):
        for impl in a.impl or IMPLS:
            r = measure(impl, payload, a.messages, events)
            rows.append(r)
            print(f"{payload} {impl}: " + ", ".join(f"{k} {v:.1f}" for k, v in r.items() if isinstance(v, float)), file=sys.stderr, flush=True)
    print(table(rows))
    print(f"load average {os.getloadavg()}; events {events}")
    if a.out:
        with open(a.out, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
