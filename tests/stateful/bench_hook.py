"""What do the step points cost in production?  ``python tests/stateful/bench_hook.py``

Times the ring's hot path in one process through the protocol endpoints (ringcast.endpoint, what
MessageQueue runs): the writer endpoint publishes one message (claim, clear written, payload,
clear the read flag, publish, NotifyLoadWaiters), the reader endpoint receives it (load written,
load its flag, copy, ack, NotifyLoadWaiters); one reader, a 64-byte message, nobody parked: 11
step points.  The real classes (step hook None: one NULL test per C step, one is-None test per
Python one) run against copies without any: the extension (the binding and the protocol core,
src/ringcast/core/) compiled with ``-DRINGCAST_NO_TRACEPOINTS`` (a scratch build,
:func:`notrace_protocol`), and ringcast/waiting.py's and ringcast/endpoint.py's source recompiled
on it (builds.py).  Trials alternate between the two so that
drift affects both; it prints the median ns per message of each, their difference, and the
spread between trials of the same code (the noise).  test_bench_hook calls :func:`measure`.

``--arena`` does the same for the tensor arena's slot steps (:func:`measure_arena`): one 4 KiB
buffer placed in a slot (ArenaClaim, ArenaClearWritten, ArenaWrite, ArenaClearReleased,
ArenaPublish) and one reader's view of it built and dropped (ArenaRelease): 6 step points per
buffer, against arena.py compiled without its 8 checks.
"""

from __future__ import annotations

import ast
import importlib
import re
import statistics
import sys
import time
from pathlib import Path

try:
    from .builds import module_on, protocol_build
except ImportError:  # run as a script: python tests/stateful/bench_hook.py
    from builds import module_on, protocol_build

CORE = Path(__file__).resolve().parents[2] / "src" / "ringcast" / "core"
_C_TEXT = "\n".join(p.read_text() for p in sorted(CORE.glob("rc_*.c")))  # the core's steps and waits
#: the spec actions whose tracepoints the core has, by the Python module that wraps them (the
#: endpoints: the binding's only types that run steps)
C_ACTIONS = {"endpoint": re.findall(r"/\* Spec: ((?:Writer|Reader|Park|Notify|Poll)\w+)", _C_TEXT)}


def notrace_protocol():
    """ringcast._protocol built from the checkout's _protocol.c with its tracepoints compiled out
    (builds.protocol_build: once per process, loaded beside the real module)."""
    build = protocol_build("RINGCAST_NO_TRACEPOINTS")
    if build.TRACEPOINTS != 0:
        raise RuntimeError("the comparison build of _protocol.c has its tracepoints")
    return build


class _Strip(ast.NodeTransformer):
    """``if _steps.hook is not None: ...`` removed (arena.py's checks), counted"""

    removed = 0

    def visit_If(self, node):
        if ast.unparse(node.test) == "_steps.hook is not None":
            self.removed += 1
            return None
        return self.generic_visit(node)


def stripped_module(mod, replace: dict | None = None):
    """``mod`` (ringcast.waiting, .endpoint, .arena) recompiled without the hook checks, on
    the C steps without tracepoints (:func:`notrace_protocol`); returns (module namespace, how
    many checks were removed: the Python ones and the C tracepoints). ``replace`` overrides names
    the module imported (the stripped classes of the modules below it)."""
    strip = _Strip()
    ns = module_on(mod, notrace_protocol(), replace, strip)
    return ns, strip.removed + len(C_ACTIONS.get(mod.__name__.rsplit(".", 1)[1], ()))


def stripped(name: str):
    """``ringcast.<name>`` (waiting, endpoint, arena) without its hook checks: (namespace,
    checks removed); the stripped endpoint is built on the stripped waiting classes."""
    mod = importlib.import_module(f"ringcast.{name}")
    if name != "endpoint":
        return stripped_module(mod)
    wns, r1 = stripped("waiting")
    ens, r2 = stripped_module(mod, {k: wns[k] for k in ("Counters", "Cancel", "WaitPolicy")})
    return ens, r1 + r2


def _copy64(view) -> bytes:
    return bytes(view[:64])


def message_loop(ns, ring, n: int, payload: bytes) -> float:
    w, r = ns["WriterEndpoint"](ring), ns["ReaderEndpoint"](ring, 0)
    parts = (payload,)
    t0 = time.perf_counter_ns()
    for _ in range(n):
        w.publish(parts)
        r.receive(_copy64)
    dt = (time.perf_counter_ns() - t0) / n
    r.release()
    return dt


def _compare(name: str, segment, loop, trials: int) -> dict:
    """``trials`` alternating timings of ``loop(namespace, segment)`` on the real classes of
    ``ringcast.<name>`` (hook None) and on the stripped ones (:func:`stripped`): their medians,
    difference, and the noise (the larger standard deviation between trials of the same code).
    ``segment`` (a ring or an arena) is unlinked and closed afterwards."""
    import ringcast.steps as steps

    try:
        if steps.get_step_hook() is not None:
            raise RuntimeError("a step hook is installed; the benchmark measures production (hook None)")
        ns, removed = stripped(name)
        real = vars(importlib.import_module(f"ringcast.{name}"))
        hooked, plain = map(list, zip(*[(loop(real, segment), loop(ns, segment)) for _ in range(trials)]))
    finally:
        segment.unlink()
        segment.close()
    mh, mp = statistics.median(hooked), statistics.median(plain)
    noise = max(statistics.pstdev(hooked), statistics.pstdev(plain))
    return {"checks_removed": removed, "ns_per_message_hook_none": mh, "ns_per_message_no_checks": mp,
            "difference_ns": mh - mp, "difference_pct": 100.0 * (mh - mp) / mp, "noise_ns": noise,
            "within_noise": abs(mh - mp) <= 2 * noise, "trials_hook_none": hooked, "trials_no_checks": plain}


def measure(iterations: int = 200_000, trials: int = 9) -> dict:
    import ringcast.ring as ring

    return _compare("endpoint", ring.ShmRingBuffer(1, 256, 4), lambda n, rb: message_loop(n, rb, iterations, b"x" * 64), trials)


def _arena_loop(ns, arena, n: int, buf: bytes) -> float:
    w = ns["ArenaWriter"](arena, lambda: [0], lambda rs: [], min_bytes=1)
    r = ns["ArenaReader"](arena, 0)
    bufs, sizes = [buf], [len(buf)]
    t0 = time.perf_counter_ns()
    for _ in range(n):
        s = w.place(bufs, sizes)[0]
        r.view(s, 64)  # dropped at once: the finalizer releases the slot
    return (time.perf_counter_ns() - t0) / n


def measure_arena(iterations: int = 50_000, trials: int = 9) -> dict:
    """One buffer through a 1-slot, 1-reader arena per iteration: real arena.py (hook None)
    against arena.py without its hook checks."""
    import ringcast.arena as arena

    return _compare("arena", arena.TensorArena.create(1, 4096, 1), lambda n, a: _arena_loop(n, a, iterations, b"x" * 4096),
                    trials)


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="cost of the step hook checks on the ring's hot path")
    ap.add_argument("--iterations", type=int, default=200_000)
    ap.add_argument("--trials", type=int, default=9)
    ap.add_argument("--arena", action="store_true", help="the tensor arena's slot steps instead of the ring's")
    a = ap.parse_args(argv)
    if a.arena:
        r = measure_arena(a.iterations // 4, a.trials)
        what, unit, per = "6 steps per buffer", "ns/buffer", " (placed in a slot, viewed and dropped, 1 reader, 4 KiB)"
    else:
        r = measure(a.iterations, a.trials)
        what, unit, per = "11 steps per message", "ns/message", " (write + read, 1 reader, 64 B)"
    print(f"hook checks removed in the comparison build: {r['checks_removed']} ({what})")
    print(f"hook None   : {r['ns_per_message_hook_none']:8.0f} {unit}{per}")
    print(f"no checks   : {r['ns_per_message_no_checks']:8.0f} {unit}")
    print(f"difference  : {r['difference_ns']:+8.0f} {unit} ({r['difference_pct']:+.1f}%)")
    print(f"noise (sd)  : {r['noise_ns']:8.0f} ns between trials of the same code")
    print("verdict     : " + ("within noise" if r["within_noise"] else "ABOVE noise (2 sd)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
