"""Scenario definitions: one Python file per scenario, defining ``SCENARIO = dict(...)``.

The built-in scenarios live in the repository's top-level ``stress/`` folder, which the package
ships as ``ringcast_lab._bundled.stress`` (see docs/stress.md); users add their own with ``ringcast stress --scenario FILE``. A file is loaded
by path (``runpy.run_path``), so it may compute values (``os.cpu_count()``) but should have no
side effects.

Keys (all but ``name`` optional):

``name``, ``description``, ``stresses``
    identification; ``stresses`` says in one sentence what the scenario is meant to break.
``kind``
    ``"messages"`` (default: a queue, readers and traffic, the keys below) or ``"fences"`` (the
    litmus tests of the fence primitives, :mod:`ringcast_lab.stress.fences`; it uses only
    ``iterations`` / ``quick_iterations`` per shape, ``duration`` / ``quick_duration`` as its
    planned seconds, of which 15 % go to each futex hunt, and ``timeout``).
``readers`` / ``remote_readers``
    local (shared-memory) readers and remote readers (loopback TCP).
``max_chunk_bytes``, ``max_chunks``, ``spin``, ``recheck_interval``
    queue configuration (``spin`` None keeps the library default).
``duration`` / ``quick_duration``
    seconds of traffic, split over ``phases`` by their ``share``.
``idle`` / ``quick_idle``
    seconds of silence after the traffic, to measure CPU while idle (0: none).
``phases``
    list of dicts: ``name``, ``share`` (default 1), ``kind`` ("bytes" | "dict" | "numpy"),
    ``sizes`` (payload sizes in bytes, cycled per message; the string ``"boundary"`` expands to
    sizes that pickle to exactly max_chunk_bytes-3 .. max_chunk_bytes, straddling the
    inline/overflow boundary), ``pattern`` ("flood" back-to-back | "burst" | "gap" | "rate"),
    ``burst`` (messages per burst), ``gap`` (seconds between messages or bursts), ``rate``
    (messages per second for "rate").
``slow_readers``
    ``{reader_index: seconds}``: that reader sleeps this long after every message.
``waits``
    ``{reader_index: how}``: how that reader waits for a message (default ``"block"``:
    ``dequeue``); ``"poll"``: ``select`` on the queue's ``fileno()``, then ``dequeue_nowait``
    (an event loop's way); ``"asyncio"``: ``await dequeue_async()`` in an asyncio loop, every
    await cancelled at a random point with probability 1/2 (the checker then proves that no
    cancellation lost, duplicated or reordered a message).
``timeout``
    extra seconds every process may take beyond the planned time before it is killed.
"""

from __future__ import annotations

import os
import runpy
from dataclasses import dataclass, field
from pathlib import Path

from .. import _bundled as bundled

__all__ = ["Scenario", "Phase", "load_scenario", "builtin_dir", "builtin_scenarios"]

_PATTERNS = ("flood", "burst", "gap", "rate")
_KINDS = ("messages", "fences")
WAITS = ("block", "poll", "asyncio")


@dataclass
class Phase:
    name: str = "main"
    share: float = 1.0
    kind: str = "bytes"
    sizes: list = field(default_factory=lambda: [256])
    pattern: str = "flood"
    burst: int = 1
    gap: float = 0.0
    rate: float = 0.0

    def __post_init__(self) -> None:
        if self.kind not in ("bytes", "dict", "numpy"):
            raise ValueError(f"phase {self.name!r}: kind must be 'bytes', 'dict' or 'numpy', got {self.kind!r}")
        if self.pattern not in _PATTERNS:
            raise ValueError(f"phase {self.name!r}: pattern must be one of {_PATTERNS}, got {self.pattern!r}")
        if self.sizes != "boundary":
            if isinstance(self.sizes, int):
                self.sizes = [self.sizes]
            if not self.sizes or any(not isinstance(s, int) or s < 0 for s in self.sizes):
                raise ValueError(f"phase {self.name!r}: sizes must be non-negative ints or 'boundary', got {self.sizes!r}")
        if self.pattern == "rate" and self.rate <= 0:
            raise ValueError(f"phase {self.name!r}: pattern 'rate' needs rate > 0")
        if self.pattern in ("burst", "gap") and self.gap <= 0:
            raise ValueError(f"phase {self.name!r}: pattern {self.pattern!r} needs gap > 0 (seconds)")
        if self.share <= 0:
            raise ValueError(f"phase {self.name!r}: share must be > 0")


@dataclass
class Scenario:
    name: str
    description: str = ""
    stresses: str = ""
    kind: str = "messages"
    iterations: int = 1_000_000
    quick_iterations: int = 200_000
    readers: int = 2
    remote_readers: int = 0
    max_chunk_bytes: int = 1 << 20
    max_chunks: int = 10
    spin: float | None = None
    recheck_interval: float | None = None
    duration: float = 5.0
    quick_duration: float = 1.0
    idle: float = 0.0
    quick_idle: float = 0.0
    phases: list = field(default_factory=lambda: [Phase()])
    slow_readers: dict = field(default_factory=dict)
    waits: dict = field(default_factory=dict)
    timeout: float = 30.0
    source: str = ""

    def __post_init__(self) -> None:
        if self.kind not in _KINDS:
            raise ValueError(f"scenario {self.name!r}: kind must be one of {_KINDS}, got {self.kind!r}")
        if self.iterations < 1 or self.quick_iterations < 1:
            raise ValueError(f"scenario {self.name!r}: iterations and quick_iterations must be >= 1")
        self.phases = [p if isinstance(p, Phase) else Phase(**p) for p in self.phases]
        if not self.phases:
            raise ValueError(f"scenario {self.name!r} has no phases")
        if self.readers < 0 or self.remote_readers < 0 or self.readers + self.remote_readers < 1:
            raise ValueError(f"scenario {self.name!r} needs at least one reader")
        for r in self.slow_readers:
            if not 0 <= int(r) < self.readers + self.remote_readers:
                raise ValueError(f"scenario {self.name!r}: slow reader {r} does not exist")
        self.slow_readers = {int(k): float(v) for k, v in self.slow_readers.items()}
        self.waits = {int(k): v for k, v in self.waits.items()}
        for r, how in self.waits.items():
            if not 0 <= r < self.readers + self.remote_readers or how not in WAITS:
                raise ValueError(f"scenario {self.name!r}: waits[{r}] = {how!r}: a reader index and one of {WAITS}")
        if any(p.kind == "numpy" for p in self.phases):
            try:
                import numpy  # noqa: F401
            except ImportError as e:  # pragma: no cover - numpy is installed with the stress extra
                raise ValueError(f"scenario {self.name!r} has a numpy phase but numpy is not importable") from e

    @property
    def n_readers(self) -> int:
        return self.readers + self.remote_readers

    def plan(self, quick: bool, scale: float = 1.0) -> tuple[float, float]:
        """(traffic seconds, idle seconds) for this run."""
        d = self.quick_duration if quick else self.duration
        i = self.quick_idle if quick else self.idle
        return d * scale, i * scale


def load_scenario(path: str | os.PathLike) -> Scenario:
    """Run the file and build its ``SCENARIO``; errors name the file."""
    path = Path(path)
    try:
        ns = runpy.run_path(str(path), run_name="ringcast_scenario")
    except FileNotFoundError:
        raise
    except Exception as e:
        raise ValueError(f"{path}: error while loading the scenario file: {e!r}") from e
    spec = ns.get("SCENARIO")
    if not isinstance(spec, dict):
        raise ValueError(f"{path}: a scenario file must define SCENARIO = dict(...)")
    spec = dict(spec)
    spec.setdefault("name", path.stem.split("_", 1)[-1] if path.stem[:1].isdigit() else path.stem)
    unknown = set(spec) - set(Scenario.__dataclass_fields__) - {"source"}
    if unknown:
        raise ValueError(f"{path}: unknown scenario key(s) {sorted(unknown)}; see docs/stress.md for the keys")
    try:
        sc = Scenario(**spec)
    except (TypeError, ValueError) as e:
        raise ValueError(f"{path}: {e}") from e
    sc.source = str(path)
    return sc


def builtin_dir() -> Path | None:
    """The built-in scenarios: the repository's ``stress/`` folder, shipped inside the package
    (``ringcast_lab._bundled.stress``); None where the installation lacks it."""
    try:
        return bundled.path("stress")
    except FileNotFoundError:
        return None


def builtin_scenarios() -> list[Path]:
    d = builtin_dir()
    if d is None:
        return []
    return sorted(p for p in d.glob("*.py") if not p.name.startswith("_"))
