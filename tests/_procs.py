"""Run test children in 'spawn' processes, bounded: every child has a deadline, leftovers are
killed, a child's exception comes back with its traceback, and a child that returns holding a
ringcast memfd segment (a descriptor or a mapping, :func:`memfd_holdings`) fails."""

from __future__ import annotations

import gc
import multiprocessing as mp
import os
import queue as _queue
import shutil
import subprocess
import sys
import traceback

CTX = mp.get_context("spawn")


def can_mount_small_shm() -> bool:
    """Whether this process may give a child a private mount namespace with its own small
    /dev/shm (root and util-linux's unshare)."""
    if not shutil.which("unshare"):
        return False
    r = subprocess.run(["unshare", "--mount", "sh", "-c", "mount -t tmpfs -o size=1m tmpfs /dev/shm"], capture_output=True)
    return r.returncode == 0


def python_under_small_shm(size: str, args: list[str], timeout: float) -> subprocess.CompletedProcess:
    """Run ``python *args`` in a private mount namespace whose /dev/shm is a fresh tmpfs of
    ``size`` (e.g. "1m", "64m"); text output captured, killed after ``timeout`` seconds."""
    mount = f"mount -t tmpfs -o size={size} tmpfs /dev/shm && exec \"$0\" \"$@\""
    return subprocess.run(["unshare", "--mount", "sh", "-c", mount, sys.executable, *args], capture_output=True, text=True,
                          timeout=timeout)


def memfd_holdings(pid: int | str = "self") -> set[str]:
    """The ringcast memfd segments process ``pid`` holds, as strings that differ for each
    holding: open descriptors ("fd N -> /memfd:ringcast (deleted) @inode") and mappings
    ("map ADDR-RANGE @inode"). A segment is anonymous, so these are the only traces it leaves; a
    creator's descriptor keeps it attachable, a mapping keeps its pages (from Python 3.13 an mmap
    keeps no descriptor, so only /proc/PID/maps shows it)."""
    from ringcast.shm import MEMFD_NAME

    prefix = f"/memfd:{MEMFD_NAME}"
    out = set()
    try:
        fds = os.listdir(f"/proc/{pid}/fd")
    except FileNotFoundError:  # pragma: no cover - non-Linux
        return out
    for fd in fds:
        try:
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith(prefix):
                out.add(f"fd {fd} -> {target} @{os.stat(f'/proc/{pid}/fd/{fd}').st_ino}")
        except OSError:
            continue
    try:
        with open(f"/proc/{pid}/maps") as f:
            for line in f:
                fields = line.split(maxsplit=5)
                if len(fields) == 6 and fields[5].startswith(prefix):
                    out.add(f"map {fields[0]} @{fields[4]}")
    except OSError:  # pragma: no cover
        pass
    return out


def memfd_leaks(before: set[str]) -> set[str]:
    """What :func:`memfd_holdings` shows now and not in ``before`` (after a garbage collection,
    so only segments something still references count)."""
    new = memfd_holdings() - before
    if new:
        gc.collect()
        new = memfd_holdings() - before
    return new


def _trampoline(results, key, fn, args):
    before = memfd_holdings()
    try:
        value = fn(*args)
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        results.put((key, False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))
        return
    leaked = memfd_leaks(before)
    if leaked:
        results.put((key, False, f"{fn.__name__} returned holding {len(leaked)} ringcast memfd segment(s) open: {sorted(leaked)[:6]}"))
    else:
        results.put((key, True, value))


class Children:
    """``with Children(timeout) as ch: ch.start(key, fn, *args) ...; results = ch.wait()``."""

    def __init__(self, timeout: float = 60.0) -> None:
        self.timeout = timeout
        self.results = CTX.Queue()
        self.procs: dict = {}

    def start(self, key, fn, *args):
        p = CTX.Process(target=_trampoline, args=(self.results, key, fn, args), daemon=True)
        p.start()
        self.procs[key] = p
        return p

    def wait(self, keys=None) -> dict:
        import time

        keys = list(self.procs) if keys is None else list(keys)
        deadline = time.monotonic() + self.timeout
        out, errors = {}, {}
        while len(out) + len(errors) < len(keys):
            left = deadline - time.monotonic()
            if left <= 0:
                missing = [k for k in keys if k not in out and k not in errors]
                raise TimeoutError(f"children {missing} did not finish within {self.timeout}s; errors so far: {errors}")
            try:
                key, ok, value = self.results.get(timeout=min(left, 0.5))
            except _queue.Empty:
                dead = [k for k in keys if k not in out and k not in errors and not self.procs[k].is_alive() and self.procs[k].exitcode not in (0, None)]
                if dead:
                    raise RuntimeError(f"children {dead} died with exit codes {[self.procs[k].exitcode for k in dead]}")
                continue
            (out if ok else errors)[key] = value
        if errors:
            raise RuntimeError("child failures:\n" + "\n".join(f"[{k}] {v}" for k, v in errors.items()))
        return out

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        for p in self.procs.values():
            p.join(timeout=5 if exc[0] is None else 0.1)
            if p.is_alive():
                p.kill()
                p.join(5)
        self.results.close()
        self.results.join_thread()
