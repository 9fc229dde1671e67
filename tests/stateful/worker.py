"""The harness's child: :class:`ringcast_lab.trace.child.Child` (the programs every recorded run
uses) plus what the harness changes in the MessageQueue it builds, which stays on the test side:
a planted bug as the tensor arena's side (variants.ARENA_WRITERS / ARENA_READERS) with the
harness's ``arena_min_bytes``, ``tight_looks``, and the ``("views", [(message, slot, crc32),
...])`` a reader that keeps arrays adds to every report, computed from those very objects (slot
-1: not a view of the arena; arena_run.py)."""

from __future__ import annotations

import contextlib

from ringcast_lab.trace.child import Child


class Worker(Child):
    arena_reader = None  # this reader's side of the tensor arena (None: none)

    def setup_mq_writer(self, p: dict):
        with self._factories(p):
            return super().setup_mq_writer(p)

    def setup_mq_reader(self, p: dict):
        with self._factories(p):
            return super().setup_mq_reader(p)

    @contextlib.contextmanager
    def _factories(self, p: dict):
        """While the MessageQueue is built, ringcast.queue's factories are the harness's (the seam
        child.py's FakeTime uses for ``time``), each applying ``then`` to what the real one made:
        ``wait_policy`` takes ``tight_looks`` (if given) instead of what the queue picks from the
        CPU count (0: a parking run reaches ParkSnapshot after two looks); ``writer_arena`` /
        ``reader_arena`` give the ``arena_variant`` side (a planted bug, or the real one), the
        writer's taking buffers from ``arena_min_bytes`` on. RuntimeError if the queue was built
        without them."""
        import dataclasses

        import ringcast.queue as q

        from .variants import ARENA_READERS, ARENA_WRITERS

        variant = p.get("arena_variant", "correct")
        then = {
            "wait_policy": lambda pol: dataclasses.replace(pol, tight_looks=p["tight_looks"]) if "tight_looks" in p else pol,
            "writer_arena": lambda aw: ARENA_WRITERS[variant](aw.arena, aw.live_readers, aw.dead_readers,
                                                              p.get("arena_min_bytes", aw.min_bytes)),
            "reader_arena": lambda ar: None if ar is None else ARENA_READERS[variant](ar.arena, ar.r),
        }
        real, made = {name: getattr(q, name) for name in then}, {}

        def factory(name: str):
            def make(*args):
                made[name] = then[name](real[name](*args))
                return made[name]
            return make

        vars(q).update({name: factory(name) for name in then})
        try:
            yield
        finally:
            vars(q).update(real)
        self.arena_reader = made.get("reader_arena")
        if missing := {"wait_policy", *(["writer_arena"] if "tensor_arena_bytes" in p else [])} - made.keys():
            raise RuntimeError(f"MessageQueue was built without ringcast.queue.{' / '.join(sorted(missing))}: the harness "
                               "cannot set tight_looks or the arena's side; update Worker._factories")

    def report(self, head: tuple) -> None:
        if self.keep:
            self.events.append(("views", self._views()))
        super().report(head)

    def _views(self) -> list:
        """``(message, slot, crc32)`` of every kept array, from the array itself: the slot its
        memory lies in (-1: not in the arena) and a checksum of its bytes."""
        import zlib

        import numpy as np

        a = self.arena_reader.arena
        base = np.frombuffer(a.buf, np.uint8).ctypes.data + a.data_off
        out = []
        for k, obj in self.kept.items():
            addr = obj.__array_interface__["data"][0]
            s = (addr - base) // a.slot_bytes if base <= addr < base + a.n_slots * a.slot_bytes else -1
            out.append((k, s, zlib.crc32(obj.tobytes())))
        return out

    def cleanup(self) -> None:
        ar, self.arena_reader = self.arena_reader, None
        super().cleanup()
        if ar is not None and ar.held:  # a release interrupted in its hook never ran: unmap anyway
            ar.held.clear()
            ar.arena.close()
