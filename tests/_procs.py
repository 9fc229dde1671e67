"""Run test children in 'spawn' processes, bounded: every child has a deadline, leftovers are
killed, and a child's exception comes back with its traceback."""

from __future__ import annotations

import multiprocessing as mp
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


def _trampoline(results, key, fn, args):
    try:
        results.put((key, True, fn(*args)))
    except BaseException as e:  # noqa: BLE001 - reported to the parent
        results.put((key, False, f"{type(e).__name__}: {e}\n{traceback.format_exc()}"))


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
