"""What do the step points cost in production?  ``python tests/stateful/bench_hook.py``

Times the ring's hot path in one process (writer: claim, clear written, payload, clear the read
flag, publish, NotifyLoadWaiters; reader: load written, load its flag, copy, ack,
NotifyLoadWaiters; one reader, a 64-byte message, nobody parked: 11 step points) with the real
RingWriter / RingReader / EventCount (step hook None: one is-None test per step) against copies
of the same classes compiled from ringcast/ring.py's and ringcast/waiting.py's source with every
``if _step_hook is not None: ...`` / ``if _ring._step_hook is not None: ...`` removed.  Trials alternate between the two so
that drift affects both; it prints the median ns per message of each, their difference, and the
spread between trials of the same code (the noise).  The stress suite can call :func:`measure`.
"""

from __future__ import annotations

import ast
import inspect
import statistics
import sys
import textwrap
import time


def _is_hook_check(t) -> bool:
    """``_step_hook is not None`` (ring.py) or ``_ring._step_hook is not None`` (waiting.py)."""
    if not (isinstance(t, ast.Compare) and len(t.ops) == 1 and isinstance(t.ops[0], ast.IsNot)):
        return False
    left = t.left
    return (isinstance(left, ast.Name) and left.id == "_step_hook") or (
        isinstance(left, ast.Attribute) and left.attr == "_step_hook"
        and isinstance(left.value, ast.Name) and left.value.id == "_ring")


def stripped_module(mod):
    """``mod`` (ringcast.ring or ringcast.waiting) recompiled without the hook checks; returns
    (module namespace, how many checks were removed)."""
    src = textwrap.dedent(inspect.getsource(mod))
    tree = ast.parse(src)
    removed = 0

    class Strip(ast.NodeTransformer):
        def visit_If(self, node):
            nonlocal removed
            if _is_hook_check(node.test):
                removed += 1
                return None
            return self.generic_visit(node)

    tree = ast.fix_missing_locations(Strip().visit(tree))
    import types

    name = f"ringcast._{mod.__name__.rsplit('.', 1)[1]}_nohook"
    m = types.ModuleType(name)
    m.__package__, m.__file__ = "ringcast", mod.__file__
    sys.modules[name] = m  # dataclasses look their module up while the class is built
    try:
        exec(compile(tree, mod.__file__ + " (no hook)", "exec"), m.__dict__)
    finally:
        del sys.modules[name]
    return m.__dict__, removed


def stripped_ring_module():
    import ringcast.ring as ring

    return stripped_module(ring)


def stripped_waiting_module():
    import ringcast.waiting as waiting

    return stripped_module(waiting)


def _loop(W, R, EC, ring, n: int, payload: bytes) -> float:
    from ringcast.waiting import Counters

    w, r = W(ring), R(ring, 0)
    wn = EC(*ring.write_seq_addrs(), Counters(), "writer", w)  # the writer notifies readers here
    rn = EC(*ring.read_seq_addrs(), Counters(), 0, r)  # reader 0 notifies the writer here
    parts = (payload,)
    t0 = time.perf_counter_ns()
    for _ in range(n):
        w._writer_claim()
        w.begin()
        w._writer_write_payload(parts)
        w.finish()
        wn.notify()
        r.ready()
        with r._reader_copy() as v:
            bytes(v[:64])
        r._reader_ack()
        rn.notify()
    return (time.perf_counter_ns() - t0) / n


def measure(iterations: int = 200_000, trials: int = 9) -> dict:
    import ringcast.ring as ring
    from ringcast.waiting import EventCount

    ns, removed = stripped_ring_module()
    wns, wremoved = stripped_waiting_module()
    removed += wremoved
    rb = ring.ShmRingBuffer(1, 256, 4)
    try:
        if ring.get_step_hook() is not None:
            raise RuntimeError("a step hook is installed; the benchmark measures production (hook None)")
        payload = b"x" * 64
        hooked, plain = [], []
        for _ in range(trials):
            hooked.append(_loop(ring.RingWriter, ring.RingReader, EventCount, rb, iterations, payload))
            plain.append(_loop(ns["RingWriter"], ns["RingReader"], wns["EventCount"], rb, iterations, payload))
    finally:
        rb.close()
        rb.unlink()
    mh, mp = statistics.median(hooked), statistics.median(plain)
    noise = max(statistics.pstdev(hooked), statistics.pstdev(plain))
    return {
        "checks_removed": removed,
        "ns_per_message_hook_none": mh,
        "ns_per_message_no_checks": mp,
        "difference_ns": mh - mp,
        "difference_pct": 100.0 * (mh - mp) / mp,
        "noise_ns": noise,
        "within_noise": abs(mh - mp) <= 2 * noise,
        "trials_hook_none": hooked,
        "trials_no_checks": plain,
    }


def main(argv=None) -> int:
    import argparse

    ap = argparse.ArgumentParser(description="cost of the step hook checks on the ring's hot path")
    ap.add_argument("--iterations", type=int, default=200_000)
    ap.add_argument("--trials", type=int, default=9)
    a = ap.parse_args(argv)
    r = measure(a.iterations, a.trials)
    print(f"hook checks removed in the comparison build: {r['checks_removed']} (11 steps per message)")
    print(f"hook None   : {r['ns_per_message_hook_none']:8.0f} ns/message (write + read, 1 reader, 64 B)")
    print(f"no checks   : {r['ns_per_message_no_checks']:8.0f} ns/message")
    print(f"difference  : {r['difference_ns']:+8.0f} ns/message ({r['difference_pct']:+.1f}%)")
    print(f"noise (sd)  : {r['noise_ns']:8.0f} ns between trials of the same code")
    print("verdict     : " + ("within noise" if r["within_noise"] else "ABOVE noise (2 sd)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
