"""How much memory a new anonymous segment can take: the least of the machine's MemAvailable and
every memory cgroup's limit minus its usage, this process's cgroup and each ancestor (cgroup v2
``memory.max``/``memory.current``, v1 ``memory.limit_in_bytes``/``memory.usage_in_bytes``).

Used by :mod:`ringcast.shm` before it reserves a memfd segment, so a segment that would not fit
fails with a :class:`ShmSpaceError` naming the limit instead of waking the cgroup's OOM killer.
Reads only /proc and /sys/fs/cgroup; imports nothing else from ringcast but the errors.
"""

from __future__ import annotations

import errno
import os

from .errors import ShmSpaceError

__all__ = ["memory_headroom", "memory_error", "fmt_bytes"]


def fmt_bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    raise AssertionError


def _read_int(path: str) -> int | None:
    """An integer file (cgroup knobs); None if missing, unreadable or 'max'."""
    try:
        with open(path) as f:
            text = f.read().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None


def _meminfo(key: str, path: str = "/proc/meminfo") -> int | None:
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None


def _memory_cgroup_dirs(proc: str = "/proc/self") -> list[tuple[str, str, str]]:
    """``(directory, limit file, usage file)`` of this process's memory cgroup and each ancestor up
    to its mount point: cgroup v2 (memory.max, memory.current) and v1 (memory.limit_in_bytes,
    memory.usage_in_bytes), found through /proc/self/cgroup and /proc/self/mountinfo."""
    try:
        with open(f"{proc}/cgroup") as f:
            groups = [line.rstrip("\n").split(":", 2) for line in f]
        with open(f"{proc}/mountinfo") as f:
            mounts = [line.split(" - ", 1) for line in f if " - " in line]
    except OSError:
        return []
    out = []
    for fields, tail in mounts:
        left, right = fields.split(), tail.split()
        if len(left) < 5 or len(right) < 3:
            continue
        root, point = (p.replace("\\040", " ") for p in left[3:5])
        if right[0] == "cgroup2":
            files, want = ("memory.max", "memory.current"), lambda ctrl: ctrl == ""
        elif right[0] == "cgroup" and "memory" in right[2].split(","):
            files, want = ("memory.limit_in_bytes", "memory.usage_in_bytes"), lambda ctrl: "memory" in ctrl.split(",")
        else:
            continue
        for entry in groups:
            if len(entry) != 3 or not want(entry[1]):
                continue
            rel = os.path.relpath(entry[2], root)
            if rel.startswith(".."):
                continue  # this mount does not show our cgroup
            d = os.path.normpath(os.path.join(point, rel))
            while True:
                out.append((d, *files))
                if d == os.path.normpath(point) or d == "/":
                    break
                d = os.path.dirname(d)
    return out


_UNLIMITED = 1 << 60  # cgroup v1 writes "no limit" as PAGE_COUNTER_MAX pages (about 2**63)


def memory_headroom() -> tuple[int, str] | None:
    """``(bytes, what)``: how much new memory this process can take, the least of MemAvailable
    and each memory cgroup's limit minus its usage (every ancestor counts), with a phrase naming
    the one that limits. None where nothing can be read (non-Linux)."""
    found = []
    avail = _meminfo("MemAvailable")
    if avail is not None:
        found.append((avail, f"the machine has {fmt_bytes(avail)} available (MemAvailable in /proc/meminfo)"))
    for d, limit_file, usage_file in _memory_cgroup_dirs():
        limit, usage = _read_int(os.path.join(d, limit_file)), _read_int(os.path.join(d, usage_file))
        if limit is None or usage is None or limit >= _UNLIMITED:
            continue
        left = max(0, limit - usage)
        found.append((left, f"memory cgroup {d} has {fmt_bytes(left)} left ({limit_file} {fmt_bytes(limit)}, {usage_file} {fmt_bytes(usage)})"))
    return min(found) if found else None


def memory_error(size: int, headroom: tuple[int, str] | None, err: int = errno.ENOMEM) -> ShmSpaceError:
    why = "the kernel refused to reserve it" if headroom is None else headroom[1]
    return ShmSpaceError(
        err,
        f"cannot create a {fmt_bytes(size)} anonymous shared-memory segment: {why}. Lower max_chunks x "
        "max_chunk_bytes, or give the container or cgroup more memory (docker run --memory=..., "
        "memory.max); /dev/shm's size does not matter for this kind of segment",
    )
