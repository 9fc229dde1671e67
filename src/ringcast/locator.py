"""Where a shared-memory segment is: the :class:`Locator` a peer attaches with (what a queue's
handle carries), and :func:`is_int`, the check of every integer a handle may carry. Pure data:
nothing here opens or maps anything (:mod:`ringcast.shm` does)."""

from __future__ import annotations

import os
from dataclasses import dataclass

from .errors import HandleError

__all__ = ["Locator", "is_int", "NAME_MAX", "TOKEN_BYTES"]

NAME_MAX = 255  # bytes in a file name (a posix segment is a file in SHM_DIR)
TOKEN_BYTES = 16  # 128 random bits at file offset `size`, past the mapped bytes


@dataclass(frozen=True)
class Locator:
    """Everything a peer needs to attach, small and picklable. ``str(loc)`` is a one-line form that
    :meth:`parse` reads back: the plain name for ``posix`` (what vLLM-style handles carry), and
    ``memfd/<pid>/<start>/<fd>/<size>/<token>`` for ``memfd`` (a '/' no POSIX name may contain)."""

    kind: str  # "memfd" or "posix"
    size: int = 0  # bytes mapped; 0 for a posix name of unknown size
    name: str = ""  # posix only
    pid: int = 0  # memfd: the creator's pid and start time (clock ticks since boot, 0 = unknown)
    start: int = 0
    fd: int = -1  # memfd: the creator's descriptor
    token: str = ""  # memfd: 32 hex digits, also written at file offset `size`

    def __str__(self) -> str:
        if self.kind == "posix":
            return self.name
        return f"memfd/{self.pid}/{self.start}/{self.fd}/{self.size}/{self.token}"

    @classmethod
    def parse(cls, text) -> "Locator":
        """A locator from its string form (a bare name is a posix segment); HandleError if malformed."""
        if isinstance(text, Locator):
            return text.checked()
        if not isinstance(text, str) or not text:
            raise HandleError(f"a segment locator must be a non-empty str or a Locator, got {text!r}")
        if not text.startswith("memfd/"):
            return cls("posix", name=text).checked()
        parts = text.split("/")
        try:
            if len(parts) != 6:
                raise ValueError
            pid, start, fd, size = (int(p) for p in parts[1:5])
        except ValueError:
            raise HandleError(
                f"malformed memfd locator {text!r}: expected memfd/<pid>/<start>/<fd>/<size>/<token>, as "
                "str(segment.locator) writes it; pass the writer's handle unchanged"
            ) from None
        return cls("memfd", size=size, pid=pid, start=start, fd=fd, token=parts[5]).checked()

    def checked(self) -> "Locator":
        """Self, or HandleError naming the field that no segment could have."""
        if self.kind == "posix":
            if (not isinstance(self.name, str) or self.name in ("", ".", "..") or "/" in self.name or "\0" in self.name
                    or len(os.fsencode(self.name)) > NAME_MAX):
                raise HandleError(
                    f"shared-memory name must be a str of 1 to {NAME_MAX} bytes without '/' or NUL, and not '.' or "
                    f"'..', got {self.name!r}: pass the writer's handle unchanged"
                )
            bad = None if is_int(self.size, 0) else "size"
        elif self.kind == "memfd":
            bad = next((f for f, low in (("pid", 1), ("start", 0), ("fd", 0), ("size", 1)) if not is_int(getattr(self, f), low)), None)
            if bad is None and not (isinstance(self.token, str) and len(self.token) == 2 * TOKEN_BYTES and set(self.token) <= _HEX):
                bad = "token"
        else:
            raise HandleError(f"segment kind must be 'memfd' or 'posix', got {self.kind!r}")
        if bad:
            raise HandleError(f"{self.kind} locator has an invalid {bad}: {getattr(self, bad)!r} (locator {self!r})")
        return self


_HEX = set("0123456789abcdef")


def is_int(v, low: int = 0) -> bool:
    """``v`` is an int (not a bool) in ``[low, 2**62)``: a field a handle may carry."""
    return isinstance(v, int) and not isinstance(v, bool) and low <= v < 1 << 62
