"""The tensor arena in the stateful harness (docs/stateful.md, *Tensor arena*): :class:`ArenaRun`
is a :class:`queue_run.QueueRun` whose MessageQueue has a tensor arena, stepped at the ring's and
the arena's hooks and checked after every step against :class:`ArenaModel`, a port of
spec/Arena.tla (MM = "SC") at the code's granularity: conformance (slot flags and bytes, the
writer's order, where each kept array lies), Arena.NoOverwrite (no live view's slot holds another
message or is about to be written; every kept array keeps its bytes) and Arena.NoDeadLeak (a
fallback only when, at the writer's last look at each slot, a live reader held it). At the end
every live reader drops what it keeps: every slot must be released, and the writer's
statistics() must count the model's fallbacks, placements and reclaimed dead readers.
"""

from __future__ import annotations

import zlib

from hypothesis import strategies as st

from ringcast.arena import TensorArena

from ringcast_lab.trace.model import Conformance
from .queue_run import QueueRun
from .ring_run import Proc

SLOT_BYTES = 4096  # TensorArena's smallest slot: tensor_arena_bytes = slots x 4096
MIN_BYTES = 64  # the arena takes buffers from this size on (the production threshold is 1 MiB)


def arena_array(k: int, n: int):
    """Message ``k``'s array of ``n`` bytes; its content differs from every other message's."""
    import numpy as np

    return ((np.arange(n, dtype=np.uint32) * 131 + 7 * k) % 256).astype(np.uint8)


def arena_objects(max_size: int = 8):
    """Messages: arrays that take a slot (>= MIN_BYTES; without one they go inline, up to ~100
    bytes with max_chunk_bytes=256, or overflow), arrays below the threshold (inline), ints."""
    big = st.sampled_from([MIN_BYTES, 100, 1000, SLOT_BYTES]).map(lambda n: ("a", n))
    small = st.integers(1, MIN_BYTES - 1).map(lambda n: ("a", n))
    spec = st.lists(st.one_of(big, big, big, small, st.integers(0, 9).map(lambda v: ("i", v))), min_size=2, max_size=max_size)
    return spec.map(lambda specs: [arena_array(k, n) if kind == "a" else n for k, (kind, n) in enumerate(specs, start=1)])


class ArenaModel:
    """spec/Arena.tla's variables (``written``, ``released``, ``data``, ``views``, ``alive``,
    ``badFallback``) and actions, one method each, at the code's granularity: ``ArenaClaim``
    tries one slot (``tries`` failed ones in this pass; a failed claim stutters), the second pass
    follows an ``ArenaReclaimDead`` that took something back, ``ArenaClearReleased`` clears one
    reader's flag (``wr``: the next).  Messages are numbered as the ring's (``msg``); ``log`` maps
    a message to its slot.  Counters mirror the writer's statistics()."""

    def __init__(self, S: int, NR: int) -> None:
        self.S, self.NR = S, NR
        self.written = [0] * S
        self.released = [[0] * NR for _ in range(S)]
        self.data = [0] * S
        self.wpc = "claim"  # claim, clear_written, write, clear_released, publish
        self.slot = -1
        self.msg = 0
        self.tries = 0
        self.second = False  # the second pass (after a reclaim)
        self.wr = 0
        self.log: dict[int, int] = {}
        self.views: list[set] = [set() for _ in range(NR)]  # (slot, message) alive in reader r
        self.alive = [True] * NR
        self.bad_fallback: str | None = None
        #: this placement's looks: slot -> (its holders, the readers alive) at its last failed
        #: ArenaClaim; the readers dead at its ArenaReclaimDead (None: none yet)
        self.looks: dict[int, tuple[list, set]] = {}
        self.dead_seen: set | None = None
        self.fallbacks = self.hits = self.reclaimed = 0

    def flags(self, s: int) -> bytes:
        return bytes([self.written[s], *self.released[s]])

    def free(self, s: int) -> bool:
        return self.written[s] == 0 or all(self.released[s])

    def holders(self, s: int) -> list[int]:
        return [r for r in range(self.NR) if self.written[s] == 1 and self.released[s][r] == 0]

    def expected(self) -> tuple[str, ...]:
        """What the writer may do next ("ring": a ring step, or done)."""
        if self.wpc != "claim":
            return ("Arena" + "".join(w.title() for w in self.wpc.split("_")),)
        if self.tries < self.S:
            return ("ArenaClaim", "ring") if self.tries == 0 and not self.second else ("ArenaClaim",)
        return ("ArenaFallback",) if self.second else ("ArenaReclaimDead", "ArenaFallback")

    # -- the writer -------------------------------------------------------------------------------
    def ArenaClaim(self, s: int) -> None:
        if self.free(s):
            self.wpc, self.slot, self.tries, self.second = "clear_written", s, 0, False
            self.looks, self.dead_seen = {}, None
        else:
            self.tries += 1  # stutter: the code tries the next slot
            self.looks[s] = (self.holders(s), {r for r in range(self.NR) if self.alive[r]})

    def ArenaReclaimDead(self, s: int) -> None:
        self.dead_seen = {r for r in range(self.NR) if not self.alive[r]}
        dead = sorted({r for t in range(self.S) for r in self.holders(t) if not self.alive[r]})
        for r in dead:
            for t in range(self.S):
                self.released[t][r] = 1
        self.reclaimed += len(dead)
        self.second = True
        self.tries = 0 if dead else self.S  # nothing taken back: the fallback follows

    def ArenaFallback(self, s: int) -> None:
        for t in range(self.S):
            if t not in self.looks:
                raise Conformance(f"ArenaFallback (message {self.msg}) without a look at slot {t}: the spec falls back "
                                  "only when no slot is free")
            held, alive = self.looks[t]
            if self.dead_seen is not None:
                alive = set(range(self.NR)) - self.dead_seen
            if not any(r in alive for r in held):
                self.bad_fallback = (f"Arena.NoDeadLeak: the writer fell back (message {self.msg}) although slot {t} was "
                                     f"held only by dead readers {held} when it looked")
        self.fallbacks += 1
        self.tries, self.second = 0, False
        self.looks, self.dead_seen = {}, None

    def ArenaClearWritten(self, s: int) -> None:
        self.written[s] = 0
        self.wpc = "write"

    def ArenaWrite(self, s: int) -> None:
        self.data[s] = self.msg
        self.wpc, self.wr = "clear_released", 0

    def ArenaClearReleased(self, s: int, r: int) -> None:
        if r != self.wr:
            raise Conformance(f"ArenaClearReleased cleared reader {r}'s flag of slot {s}, the spec's next is reader {self.wr}'s")
        self.released[s][r] = 0
        self.wr += 1
        if self.wr == self.NR:
            self.wpc = "publish"

    def ArenaPublish(self, s: int) -> None:
        self.written[s] = 1
        self.log[self.msg] = s
        self.hits += 1
        self.wpc, self.slot = "claim", -1

    # -- readers ----------------------------------------------------------------------------------
    def ArenaRelease(self, r: int, s: int) -> None:
        self.released[s][r] = 1

    def step(self, action: str, index: int, extra, r: int | None, msg: int) -> None:
        """Apply ``action`` that the writer (``r`` None) or reader ``r`` just executed on slot ``index``."""
        if action in ("ArenaClaim", "ArenaRelease") and not 0 <= index < self.S:
            raise Conformance(f"{'W' if r is None else f'R{r}'}'s {action} on slot {index}, the arena has slots 0..{self.S - 1}")
        if r is not None:
            if action != "ArenaRelease":
                raise Conformance(f"reader {r} executed the writer's {action}")
            self.ArenaRelease(r, index)
            return
        if self.wpc != "claim" and index != self.slot:
            raise Conformance(f"writer executed {action} on slot {index}, the spec's writer fills slot {self.slot}")
        self.msg = msg
        if action == "ArenaClearReleased":
            self.ArenaClearReleased(index, extra)
        else:
            getattr(self, action)(index)

    # -- invariants (spec/Arena.tla) --------------------------------------------------------------
    def NoOverwrite(self) -> list[str]:
        out = []
        for r in range(self.NR):
            for s, k in sorted(self.views[r]) if self.alive[r] else ():
                if self.data[s] != k:
                    out.append(f"Arena.NoOverwrite: reader {r} holds a view of message {k} in slot {s}, which holds "
                               f"message {self.data[s]} now")
                elif self.wpc == "write" and self.slot == s:
                    out.append(f"Arena.NoOverwrite: reader {r} holds a view of message {k} in slot {s}, and the writer "
                               f"is about to write message {self.msg} into it")
        return out

    def NoDeadLeak(self) -> list[str]:
        return [self.bad_fallback] if self.bad_fallback else []

    INVARIANTS = ("NoOverwrite", "NoDeadLeak")

    def violations(self) -> list[str]:
        return [v for name in self.INVARIANTS for v in getattr(self, name)()]


#: the arena's step hook actions (spec/Arena.tla): ArenaModel's; all the writer's but ArenaRelease
ARENA_ACTIONS = frozenset(name for name in vars(ArenaModel) if name.startswith("Arena"))


class ArenaRun(QueueRun):
    """A QueueRun with a tensor arena of ``slots`` slots of 4 KiB (buffers of >= ``MIN_BYTES``
    take a slot), ``n_local`` local readers that keep what they deliver, no remote readers, no
    timeouts or shutdown (a failed publish's ``unplace`` is not a spec action).  ``reader`` /
    ``writer`` name planted bugs (variants.ARENA_READERS / ARENA_WRITERS)."""

    def __init__(self, pool, *, n_local: int, objs: list, max_chunks: int, slots: int, max_chunk_bytes: int = 256,
                 reader: str = "correct", writer: str = "correct", doomed: int | None = None) -> None:
        self.amodel = ArenaModel(slots, n_local)
        self.payload = {k: obj.tobytes() for k, obj in enumerate(objs, start=1) if type(obj).__name__ == "ndarray"}
        self.crc = {k: zlib.crc32(b) for k, b in self.payload.items()}
        self.dead: set[int] = set()
        self.doomed = doomed
        self.kept: dict[int, list] = {r: [] for r in range(n_local)}  # the (message, slot, crc) each reports
        self.stats = None
        self.arena: TensorArena | None = None
        self._copying: tuple[int, int] | None = None
        self.variants = (reader, writer)
        self.writer_opts = {"tensor_arena_bytes": slots * SLOT_BYTES, "tensor_arena_slots": slots,
                            "arena_min_bytes": MIN_BYTES, "arena_variant": writer, "stats": True}
        self.reader_opts = {"keep": True, "arena_variant": reader}
        super().__init__(pool, n_local=n_local, n_remote=0, objs=objs, max_chunk_bytes=max_chunk_bytes, max_chunks=max_chunks)

    def _attach(self, handle) -> None:
        super()._attach(handle)
        self.arena = TensorArena.attach(handle.tensor_arena)

    def describe(self) -> str:
        return f"{super().describe()} arena slots={self.amodel.S} reader={self.variants[0]} writer={self.variants[1]}"

    # -- steps --------------------------------------------------------------------------------------
    def step(self, pr: Proc, shutdown: bool = False) -> None:
        if pr.pending[0] == "ReaderCopy":  # the chunk's message: a view of its slot is built during the copy
            self._copying = (pr.p, abs(self.model.data[self.model.i[pr.p]]))
        super().step(pr, shutdown)
        if self.doomed is not None and not self.dead and (doomed := self.procs[self.doomed]) in self.crashable():
            self.crash(doomed)  # the doomed reader dies at the first moment it can

    def _take(self, pr: Proc, action: str, index: int, extra=None) -> None:
        if action not in ARENA_ACTIONS:
            return super()._take(pr, action, index, extra)
        self._checked(self.amodel.step, action, index, extra, None if pr is self.writer else pr.p, self.model.msg)

    def live_readers(self) -> list[Proc]:
        return [pr for pr in self.procs if pr is not self.writer and pr.p not in self.dead]

    def droppable(self) -> list[Proc]:
        """Live readers that keep an array and are not inside a release."""
        return [pr for pr in self.live_readers() if self.kept[pr.p] and pr.action != "ArenaRelease"]

    def drop(self, pr: Proc, k: int) -> None:
        """Reader ``pr`` drops its array of message ``k``; for a view of a slot, the finalizer's
        ArenaRelease of that slot must be its next step."""
        s = self.amodel.log.get(k, -1)
        before = pr.pending
        self.schedule.append(f"{pr.name}:drop message {k}" + (f" (slot {s})" if s >= 0 else ""))
        self.amodel.views[pr.p].discard((s, k))
        pr.worker.send(("drop", k))
        self._absorb(pr, pr.worker.recv())
        want = ("ArenaRelease", s, None) if s >= 0 else before
        if pr.pending != want:
            self.fail("Conformance", f"{pr.name} dropped its array of message {k} (slot {s}): it is now before "
                       f"{pr.pending}, expected {want}")
        self._events(pr)
        self._after_step()

    def crashable(self) -> list[Proc]:
        """Readers that may be killed now: one per run, holding a view of a slot, with everything
        they read acknowledged, so far along that the writer never needs their ring flags again
        (no eviction here)."""
        if self.dead:
            return []
        m = self.model
        return [pr for pr in self.live_readers() if m.ncopied[pr.p] >= self.M - m.N
                and pr.action in (None, "ReaderLoadWritten") and self.amodel.views[pr.p]]

    def crash(self, pr: Proc) -> None:
        """SIGKILL reader ``pr`` (it holds whatever it keeps); a fresh pool worker takes its place."""
        self.schedule.append(f"{pr.name}:killed holding messages {[k for k, _, _ in self.kept[pr.p]]}")
        k = self.pool.workers.index(pr.worker)
        self.pool.replace(pr.worker)  # kills and reaps it: /proc no longer shows it alive
        pr.worker = self.pool.workers[k]
        pr.pending, pr.hooked = None, False
        self.dead.add(pr.p)
        self.model.cancelled.add(pr.p)  # the ring's checks leave it alone; the writer never needs it again
        self.amodel.alive[pr.p] = False
        self.amodel.views[pr.p] = set()
        self.kept[pr.p] = []
        self._after_step()

    # -- checks -----------------------------------------------------------------------------------
    def _events(self, pr: Proc) -> None:
        if self._copying is not None and self._copying[0] == pr.p:
            r, k = self._copying
            self._copying = None
            if k in self.amodel.log:
                self.amodel.views[r].add((self.amodel.log[k], k))
        for ev in pr.events:
            if ev[0] == "views":
                self._check_views(pr, ev[1])
            elif ev[0] == "stats":
                self.stats = ev[1]
        super()._events(pr)

    def _check_views(self, pr: Proc, views: list) -> None:
        self.kept[pr.p] = views
        for k, s, crc in views:
            want = self.amodel.log.get(k, -1)
            if s != want:
                self.fail("Conformance", f"{pr.name}'s array of message {k} lies in slot {s}, the writer put message {k} "
                           + (f"in slot {want}" if want >= 0 else "on the normal path (a private copy)"))
            if crc != self.crc[k]:
                self.fail("Violation", f"Arena.NoOverwrite: {pr.name}'s array of message {k} (slot {s}) no longer holds "
                           f"message {k}'s bytes")

    def _check_pending(self, pr: Proc) -> None:
        action = pr.action
        if action == "ArenaRelease":
            if pr is self.writer:
                self.fail("Conformance", "the writer is about to execute ArenaRelease, a reader's step")
            return
        a = self.amodel
        if action in ARENA_ACTIONS:
            if pr is not self.writer:
                self.fail("Conformance", f"{pr.name} is about to execute the writer's {action}")
            if action not in a.expected():
                self.fail("Conformance", f"the writer is about to execute {action}, the spec allows {' or '.join(a.expected())}")
            if self.model.pc[self.model.Wr] != "claim":
                self.fail("Conformance", f"the writer is about to execute {action} in the middle of a ring message "
                           f"(pc {self.model.pc[self.model.Wr]!r}): slots are filled before the chunk is claimed")
            return
        if pr is self.writer and "ring" not in a.expected():
            self.fail("Conformance", f"the writer left the arena for {action or 'done'} where the spec allows "
                       f"{' or '.join(a.expected())}")
        super()._check_pending(pr)

    def _after_step(self) -> None:
        super()._after_step()
        a, seg = self.amodel, self.arena
        for s, k in enumerate(a.data):
            if (real := seg.flags(s)) != a.flags(s):
                self.fail("Conformance", f"arena slot {s} flags in the segment are {real.hex()}, the spec's are {a.flags(s).hex()}")
            if k and seg.buf[seg.data(s) : seg.data(s) + len(self.payload[k])] != self.payload[k]:
                self.fail("Conformance", f"arena slot {s} does not hold message {k}'s bytes, the spec's data is {k}")
        if bad := a.violations():
            self.fail("Violation", "; ".join(bad))

    def signature(self):
        return (super().signature(), repr(sorted(vars(self.amodel).items())), repr(sorted(self.kept.items())))

    def check_complete(self) -> None:
        super().check_complete()
        for pr in self.live_readers():  # every live reader drops what it keeps; each release is checked
            while self.kept[pr.p]:
                self.drop(pr, self.kept[pr.p][0][0])
                if pr.action == "ArenaRelease":
                    self.step(pr)
        a = self.amodel
        for s in range(a.S):
            if held := [r for r in a.holders(s) if a.alive[r]]:
                self.fail("Liveness", f"every view is gone, but slot {s} is still held by live readers {held} "
                           f"(flags {a.flags(s).hex()})")
        st = self.stats
        got = None if st is None else (st.arena_fallbacks, st.arena_hits, st.arena_reclaimed)
        if got != (a.fallbacks, a.hits, a.reclaimed):
            self.fail("Conformance", f"the writer's statistics() count (arena_fallbacks, arena_hits, arena_reclaimed) = "
                       f"{got}, the spec's steps were {(a.fallbacks, a.hits, a.reclaimed)}")

    def close(self) -> None:
        try:
            super().close()
        finally:
            if self.arena is not None:
                self.arena.close()
                self.arena = None
