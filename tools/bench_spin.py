"""What the adaptive spin budget costs and buys (docs/waiting.md, "The adaptive spin budget").

    python tools/bench_spin.py [--readers 3] [--gaps 0,0.3,0.7,2,10] [--messages 400]

One writer and ``--readers`` local readers of a ``MessageQueue`` (256 B scheduler-like dict,
:func:`ringcast_lab.bench.cases.make_payload`). For each gap G (ms) the writer sends a message, waits
until every reader acknowledged it (an eventfd), then sleeps G ms (0: ping-pong) before the next.
Reported per gap: the p50 time until the last reader had a message ("all readers"), each
reader's CPU as a fraction of the wall time (``time.process_time``), and the readers' waits,
spins and parks per message (``MessageQueue.statistics()``). Run it against two trees with
``PYTHONPATH=<tree>/src`` to compare wait policies side by side.
"""

from __future__ import annotations

import argparse
import multiprocessing as mp
import os
import time
from multiprocessing.reduction import DupFd


def _reader(handle, index, efd, conn, spin):
    from ringcast import MessageQueue

    efd = efd.detach()
    q = MessageQueue.create_from_handle(handle, index, **({} if spin is None else {"spin": spin}))
    q.wait_until_ready(timeout=60)
    try:
        while True:
            lat, c0, w0, s0 = [], time.process_time(), time.monotonic(), q.statistics()
            while (m := q.dequeue(timeout=60)) != "end":
                lat.append(time.monotonic_ns() - m[1])
                os.eventfd_write(efd, 1)
            s1 = q.statistics()
            conn.send((lat, (time.process_time() - c0) / (time.monotonic() - w0), [getattr(s1, k) - getattr(s0, k) for k in ("waits", "spins", "parks")]))
            if not conn.recv():
                break
    finally:
        q.close()


def run(readers: int, gaps, messages: int, spin=None) -> list[dict]:
    from ringcast import MessageQueue
    from ringcast_lab.bench.cases import make_payload

    ctx = mp.get_context("spawn")
    efd = os.eventfd(0)
    q = MessageQueue(readers, readers, **({} if spin is None else {"spin": spin}))
    procs, conns, out = [], [], []
    try:
        for i in range(readers):
            a, b = ctx.Pipe()
            p = ctx.Process(target=_reader, args=(q.export_handle(), i, DupFd(efd), b, spin), daemon=True)
            p.start()
            procs.append(p)
            conns.append(a)
        q.wait_until_ready(timeout=60)
        payload = make_payload("sched256")
        for k, gap in enumerate(gaps):
            for _ in range(messages):
                q.enqueue(("d", time.monotonic_ns(), payload))
                got = 0
                while got < readers:
                    got += os.eventfd_read(efd)
                if gap:
                    time.sleep(gap / 1e3)
            q.enqueue("end")
            res = [c.recv() for c in conns]
            for c in conns:
                c.send(k + 1 < len(gaps))
            warm = messages // 10
            last = sorted(max(col) for col in zip(*[r[0][warm:] for r in res]))
            per = [sum(r[2][j] for r in res) / (readers * messages) for j in range(3)]
            out.append({"gap_ms": gap, "all_p50_us": last[len(last) // 2] / 1e3, "reader_cpu": [round(r[1], 3) for r in res],
                        "waits_per_msg": per[0], "spins_per_msg": per[1], "parks_per_msg": per[2]})
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.kill()
        q.close()
        os.close(efd)
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--readers", type=int, default=3)
    ap.add_argument("--gaps", default="0,0.3,0.7,2,10", help="ms between one message's last ack and the next message")
    ap.add_argument("--messages", type=int, default=400)
    ap.add_argument("--spin", type=float, help="the wait policy's spin (default: the library's)")
    a = ap.parse_args(argv)
    for r in run(a.readers, [float(g) for g in a.gaps.split(",")], a.messages, a.spin):
        print(f"gap {r['gap_ms']:5.1f} ms  all readers p50 {r['all_p50_us']:7.1f} us  reader CPU {r['reader_cpu']}  "
              f"per message: waits {r['waits_per_msg']:.2f} spins {r['spins_per_msg']:.1f} parks {r['parks_per_msg']:.2f}")
    print(f"load average {os.getloadavg()}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
