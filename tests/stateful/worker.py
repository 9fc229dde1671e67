"""The harness's child: :class:`ringcast.trace.child.Child` (the programs every recorded run
uses) plus what reaches into a MessageQueue, which stays on the test side: a planted bug swapped
into the tensor arena's sides (variants.ARENA_WRITERS / ARENA_READERS), ``tight_looks``, and the
``("views", [(message, slot, crc32), ...])`` a reader that keeps arrays adds to every report,
computed from those very objects (slot -1: not a view of the arena; arena_run.py)."""

from __future__ import annotations

from ringcast.trace.child import Child


class Worker(Child):
    def setup_mq_writer(self, p: dict):
        out = super().setup_mq_writer(p)
        if "arena_variant" in p:
            from .variants import ARENA_WRITERS

            aw = self.mq._arena  # small buffers take the arena too; a planted bug replaces the writer's side
            self.mq._arena = ARENA_WRITERS[p["arena_variant"]](aw.arena, aw.live_readers, aw.dead_readers, p["arena_min_bytes"])
        self._set_tight_looks(p)
        return out

    def setup_mq_reader(self, p: dict):
        out = super().setup_mq_reader(p)
        if self.keep:
            from .variants import ARENA_READERS

            ar = self.mq._unpickler.arena  # a planted bug replaces the reader's side of the arena
            self.mq._unpickler.arena = ARENA_READERS[p.get("arena_variant", "correct")](ar.arena, ar.r)
        self._set_tight_looks(p)
        return out

    def _set_tight_looks(self, p: dict) -> None:
        """``tight_looks`` (if given) replaces the policy's looks-without-yield (the queue picks 64 or
        0 from the CPU count): 0 makes a parking run reach ParkSnapshot after two looks."""
        if "tight_looks" in p:
            import dataclasses

            self.mq.policy = pol = dataclasses.replace(self.mq.policy, tight_looks=p["tight_looks"])
            if self.mq._endpoint is not None:
                self.mq._endpoint.waiter.policy = pol

    def report(self, head: tuple) -> None:
        if self.keep:
            self.events.append(("views", self._views()))
        super().report(head)

    def _views(self) -> list:
        """``(message, slot, crc32)`` of every kept array, from the array itself: the slot its
        memory lies in (-1: not in the arena) and a checksum of its bytes."""
        import zlib

        import numpy as np

        a = self.mq._unpickler.arena.arena
        base = np.frombuffer(a.buf, np.uint8).ctypes.data + a.data_off
        out = []
        for k, obj in self.kept.items():
            addr = obj.__array_interface__["data"][0]
            s = (addr - base) // a.slot_bytes if base <= addr < base + a.n_slots * a.slot_bytes else -1
            out.append((k, s, zlib.crc32(obj.tobytes())))
        return out

    def cleanup(self) -> None:
        ar = getattr(getattr(self.mq, "_unpickler", None), "arena", None)
        super().cleanup()
        if ar is not None and ar.held:  # a release interrupted in its hook never ran: unmap anyway
            ar.held.clear()
            ar.arena.close()
