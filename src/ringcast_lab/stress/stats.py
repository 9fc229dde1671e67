"""Small, dependency-free statistics used by the stress suite and the benchmarks.

:class:`CpuSegments` accounts a process's CPU seconds, wall seconds and context switches to the
mode it is in ("busy" or "idle"), so a stress run can tell what a parked reader costs.

:class:`LatencyHistogram` keeps a log-bucketed histogram (1 % relative resolution) of
nanosecond latencies: recording is O(1), the histograms of many readers merge by adding counts,
and a histogram of millions of samples pickles to a few kilobytes, so readers can ship it to the
parent. Minimum and maximum are exact; percentiles are within 1 % of the true value.

:func:`iterations_for_power` says how many independent trials a run needs so that an event of a
given per-trial rate is missed with at most a given probability (the ``fences`` scenario's power).
"""

from __future__ import annotations

import math
import resource
import time

__all__ = ["CpuSegments", "LatencyHistogram", "median", "fmt_bytes", "fmt_rate", "iterations_for_power", "MISS_PROBABILITY", "add_counts"]

#: the chance of missing a broken fence that the ``fences`` scenario's power figures are for
MISS_PROBABILITY = 1e-6

_GROWTH = 1.01
_K = 1.0 / math.log(_GROWTH)


class LatencyHistogram:
    __slots__ = ("counts", "n", "min", "max", "total")

    def __init__(self) -> None:
        self.counts: dict[int, int] = {}
        self.n = 0
        self.min: int | None = None
        self.max: int | None = None
        self.total = 0

    def record(self, ns: int) -> None:
        if ns < 1:
            ns = 1  # clock granularity; monotonic never goes backwards across CPUs on Linux
        b = int(math.log(ns) * _K)
        c = self.counts
        c[b] = c.get(b, 0) + 1
        self.n += 1
        self.total += ns
        if self.min is None or ns < self.min:
            self.min = ns
        if self.max is None or ns > self.max:
            self.max = ns

    def merge(self, other: "LatencyHistogram") -> "LatencyHistogram":
        for b, k in other.counts.items():
            self.counts[b] = self.counts.get(b, 0) + k
        self.n += other.n
        self.total += other.total
        for attr, pick in (("min", min), ("max", max)):
            o = getattr(other, attr)
            if o is not None:
                s = getattr(self, attr)
                setattr(self, attr, o if s is None else pick(s, o))
        return self

    @staticmethod
    def _value(b: int) -> float:
        return math.exp((b + 0.5) / _K)

    def percentile(self, p: float) -> float | None:
        """The p-th percentile (0..100) in nanoseconds, or None when empty."""
        if not self.n:
            return None
        if p <= 0:
            return float(self.min)
        if p >= 100:
            return float(self.max)
        rank = p / 100.0 * self.n
        seen = 0
        for b in sorted(self.counts):
            seen += self.counts[b]
            if seen >= rank:
                return min(max(self._value(b), float(self.min)), float(self.max))
        return float(self.max)

    def mean(self) -> float | None:
        return self.total / self.n if self.n else None

    def cdf(self, points: int = 400) -> tuple[list[float], list[float]]:
        """(latency_ns, cumulative fraction) pairs for plotting, at most ``points`` of them."""
        xs: list[float] = []
        ys: list[float] = []
        if not self.n:
            return xs, ys
        seen = 0
        keys = sorted(self.counts)
        step = max(1, len(keys) // points)
        for i, b in enumerate(keys):
            seen += self.counts[b]
            if i % step == 0 or i == len(keys) - 1:
                xs.append(min(max(self._value(b), float(self.min)), float(self.max)))
                ys.append(seen / self.n)
        return xs, ys

    def to_dict(self) -> dict:
        return {"counts": {str(k): v for k, v in self.counts.items()}, "n": self.n, "min": self.min, "max": self.max, "total": self.total}

    @classmethod
    def from_dict(cls, d: dict) -> "LatencyHistogram":
        h = cls()
        h.counts = {int(k): v for k, v in d["counts"].items()}
        h.n, h.min, h.max, h.total = d["n"], d["min"], d["max"], d["total"]
        return h

    def summary(self) -> dict:
        """p50/p99/p99.9/max/mean in microseconds (None when empty)."""

        def us(v):
            return None if v is None else round(v / 1e3, 2)

        return {
            "samples": self.n,
            "p50_us": us(self.percentile(50)),
            "p99_us": us(self.percentile(99)),
            "p999_us": us(self.percentile(99.9)),
            "max_us": us(self.max),
            "mean_us": us(self.mean()),
        }


def median(xs):
    s = sorted(xs)
    n = len(s)
    if not n:
        return None
    return s[n // 2] if n % 2 else (s[n // 2 - 1] + s[n // 2]) / 2


def iterations_for_power(rate: float, miss: float = MISS_PROBABILITY) -> int | None:
    """The fewest independent trials n with ``(1 - rate) ** n <= miss``: a run of n trials misses
    an event of that per-trial rate with probability at most ``miss`` (about ``13.8 / rate`` for
    1e-6). None for a rate of 0 (no number of trials is enough) or no rate."""
    if rate is None or rate <= 0:
        return None
    if rate >= 1:
        return 1
    return max(1, math.ceil(math.log(miss) / math.log1p(-rate)))


def add_counts(total: dict, r: dict) -> None:
    """Add a job result's counts to ``total`` (flags or-ed, other values replaced), in place."""
    for k, v in r.items():
        if isinstance(v, bool):
            total[k] = total.get(k, False) or v
        elif isinstance(v, int) and k != "child_status":
            total[k] = total.get(k, 0) + v
        else:
            total[k] = v


def fmt_bytes(n) -> str:
    if n is None:
        return "-"
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(n) < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def fmt_rate(x) -> str:
    if x is None:
        return "-"
    if x >= 1e6:
        return f"{x / 1e6:.2f} M"
    if x >= 1e3:
        return f"{x / 1e3:.1f} k"
    return f"{x:.0f}"


class CpuSegments:
    """CPU seconds, wall seconds and context switches per mode ("busy" / "idle")."""

    def __init__(self) -> None:
        self.acc = {m: {"cpu_s": 0.0, "wall_s": 0.0, "vcsw": 0, "ivcsw": 0} for m in ("busy", "idle")}
        self.mode = None
        self._mark = None

    @staticmethod
    def _now():
        ru = resource.getrusage(resource.RUSAGE_SELF)
        return time.process_time(), time.monotonic(), ru.ru_nvcsw, ru.ru_nivcsw

    def switch(self, mode: str | None) -> None:
        now = self._now()
        if self.mode is not None and self._mark is not None:
            a = self.acc[self.mode]
            a["cpu_s"] += now[0] - self._mark[0]
            a["wall_s"] += now[1] - self._mark[1]
            a["vcsw"] += now[2] - self._mark[2]
            a["ivcsw"] += now[3] - self._mark[3]
        self.mode = mode
        self._mark = now

    def result(self) -> dict:
        out = {}
        for m, a in self.acc.items():
            out[m] = dict(a, cpu_frac=(a["cpu_s"] / a["wall_s"]) if a["wall_s"] > 0 else None)
        return out
