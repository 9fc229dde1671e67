"""The ``fences`` scenario of ``ringcast stress``: litmus tests of every fence shape, on this CPU.

The message-level scenarios cannot see a missing fence: between two steps of the protocol they
run whole messages (pickling, waits, system calls), so the hardware's reordering window is almost
never hit. This scenario runs the C litmus tests of ``ringcast._litmus`` (src/ringcast/_litmus.c),
built on the very primitives the C steps of ``ringcast._protocol`` run
(src/ringcast/ringcast_fences.h), in tight loops:

* each shape (eventcount, mp, mp_readflag, rtr; docs/spec.md "Litmus tests") with the shipped
  fences: any forbidden outcome is a FAIL naming the shape and the count;
* the control of each fence point of the shape (that fence replaced by a compiler-only barrier):
  how often this CPU produces the forbidden outcome when nothing stops it. A control that shows
  none is reported plainly: the fence was not exercised on this machine;
* the futex hunt: the parking protocol with the real futex between two processes; a sleep that
  ended by its timeout while the flag was set and the notifier had seen no waiter is a lost
  wake-up (FAIL with the shipped fences).

The jobs run in a child process (:mod:`ringcast.stress.litmus_child`, its own process group),
killed with the waiter its futex hunt forks if it is still running at the scenario's deadline.
Without the C extension, or with fewer than two CPUs to run on, the scenario reports NOT RUN and
why; it never passes silently.
"""

from __future__ import annotations

import json
import os
import platform
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

from .scenario import Scenario

__all__ = ["run_fences", "machine_facts", "fences_lines", "fences_markdown", "NOT_RUN"]

NOT_RUN = "NOT RUN"
HUNT_SLEEP_TIMEOUT_S = 0.01  # a lost wake-up in the control costs this much
_US_PER_ITERATION_BUDGET = 4e-6  # a job stops by itself after 2 s + this per iteration


def cpu_model() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor() or "unknown"
    for key in ("model name", "Model", "cpu model", "cpu"):
        m = re.search(rf"^{key}\s*:\s*(.+)$", text, re.M)
        if m:
            return m.group(1).strip()
    impl = re.search(r"^CPU implementer\s*:\s*(\S+)", text, re.M)
    part = re.search(r"^CPU part\s*:\s*(\S+)", text, re.M)
    if impl:
        return f"CPU implementer {impl.group(1)}, part {part.group(1) if part else '?'}"
    return platform.processor() or "unknown"


def usable_cpus() -> int:
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def machine_facts(build: dict | None) -> dict:
    """CPU model, architecture, cores, kernel, and how the extension was compiled."""
    try:
        online = os.sysconf("SC_NPROCESSORS_ONLN")
    except (ValueError, OSError):
        online = os.cpu_count()
    return {
        "cpu_model": cpu_model(),
        "arch": platform.machine(),
        "online_cores": online,
        "usable_cores": usable_cpus(),
        "kernel": f"{platform.system()} {platform.release()}",
        "extension": build,
    }


def _load_litmus():
    """(module, None) or (None, why it cannot run)."""
    import importlib

    try:
        _litmus = importlib.import_module("ringcast._litmus")
    except ImportError as e:
        return None, (
            f"the C extension ringcast._litmus is not built ({e}); the litmus tests need it. Install a C "
            "compiler (e.g. apt-get install gcc python3-dev) and reinstall ringcast (pip install -e . in a "
            "checkout) so that it is built"
        )
    return _litmus, None


def _jobs(shapes: list[dict], iterations: int, hunt_budget: float) -> list[dict]:
    budget = 2.0 + iterations * _US_PER_ITERATION_BUDGET
    jobs = []
    for control in (False, True):
        jobs.append({"kind": "hunt", "control": control, "iterations": iterations, "budget_s": hunt_budget,
                     "sleep_timeout_s": HUNT_SLEEP_TIMEOUT_S})
    for s in shapes:
        for control in (None, *s["points"]):
            jobs.append({"kind": "litmus", "shape": s["shape"], "control": control, "iterations": iterations, "budget_s": budget})
    return jobs


def _run_child(jobs: list[dict], stop_by: float, deadline: float, progress, label: str, span: float, t0: float) -> tuple[list[dict], list[str]]:
    """Run the jobs in a child process, which stops starting jobs at ``stop_by``; killed (with its
    process group) if still running at ``deadline``. (finished jobs with results, errors)."""
    errors: list[str] = []
    done: list[dict] = []
    proc = subprocess.Popen(
        [sys.executable, "-m", "ringcast.stress.litmus_child", json.dumps(jobs), repr(stop_by)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True,
    )
    lines: queue.Queue = queue.Queue()

    def pump() -> None:
        for line in proc.stdout:
            lines.put(line)
        lines.put(None)

    reader = threading.Thread(target=pump, name="ringcast-stress-litmus", daemon=True)
    reader.start()
    try:
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                errors.append(
                    f"litmus child (pid {proc.pid}) still running at the scenario's deadline "
                    f"({deadline - t0:.0f}s) after {len(done)} of {len(jobs)} jobs: killed with its process group"
                )
                break
            try:
                line = lines.get(timeout=min(left, 0.2))
            except queue.Empty:
                if progress is not None:
                    progress.update(f"{label}: {len(done)}/{len(jobs)} jobs", (time.monotonic() - t0) / max(span, 1e-9), span)
                continue
            if line is None:
                break
            done.append(json.loads(line))
    finally:
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGKILL)  # the child and the waiter its futex hunt forked
            except ProcessLookupError:
                pass
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(timeout=5)
        err = proc.stderr.read() if proc.stderr else ""
        proc.stdout.close()
        proc.stderr.close()
    if proc.returncode not in (0, -signal.SIGKILL) or (proc.returncode != 0 and not errors):
        errors.append(f"litmus child exited with code {proc.returncode}: {err.strip()[-2000:] or '(no output)'}")
    return done, errors


def _rate(forbidden, iterations) -> float | None:
    return forbidden / iterations if iterations else None


def _busy(yielded: float | None) -> str:
    """Why a quiet control may say little: the two sides seldom ran at the same time."""
    if yielded is None or yielded < 0.2:
        return ""
    return (f" (in {yielded * 100:.0f}% of the iterations a side had to give up its CPU before the two could meet: "
            "this machine is busy, so the two sides rarely raced; rerun it on an idle machine)")


def _summarise(shapes: list[dict], done: list[dict], res: dict) -> None:
    """Rows, hunt, verdict details from the finished jobs (in place)."""
    by = {(j["shape"], j["control"]): j["result"] for j in done if j["kind"] == "litmus"}
    hunts = {j["control"]: j for j in done if j["kind"] == "hunt"}
    rows = []
    for s in shapes:
        ship = by.get((s["shape"], None))
        if ship is not None and ship["forbidden"]:
            res["violations"][f"{s['shape']} shipped"] = ship["forbidden"]
            res["examples"].append(
                f"{s['shape']} ({', '.join(s['points'])}): {ship['forbidden']} forbidden outcome(s) with the shipped fences "
                f"in {ship['iterations']} iterations ({s['forbidden']})"
            )
        for p in s["points"]:
            ctl = by.get((s["shape"], p))
            row = {
                "shape": s["shape"], "fence": p, "forbidden_outcome": s["forbidden"],
                "shipped_iterations": ship["iterations"] if ship else None,
                "shipped_forbidden": ship["forbidden"] if ship else None,
                "control_iterations": ctl["iterations"] if ctl else None,
                "control_forbidden": ctl["forbidden"] if ctl else None,
                "control_rate": _rate(ctl["forbidden"], ctl["iterations"]) if ctl else None,
            }
            row["control_yielded"] = _rate(ctl["yielded"], ctl["iterations"]) if ctl else None
            rows.append(row)
            if ctl is not None and ctl["forbidden"] == 0:
                res["notes"].append(
                    f"{s['shape']} control of {p}: this CPU did not show the reordering in {ctl['iterations']} iterations, "
                    f"so {p} was not exercised here" + _busy(row["control_yielded"])
                )
    for (shape, control), r in by.items():
        what = f"{shape} {'control of ' + control if control else 'shipped'}"
        if r["aborted"]:
            res["incomplete"].append(f"{what}: aborted after {r['iterations']} iterations (a thread waited for the other at "
                                     "the barrier for more than 2 s past the job's time budget)")
        elif r["iterations"] < res["iterations"]:
            res["warnings"].append(f"{what}: stopped at its time budget after {r['iterations']} of {res['iterations']} iterations")
    res["rows"] = rows
    hunt = {}
    for control, name in ((False, "shipped"), (True, "control")):
        j = hunts.get(control)
        if j is None:
            continue
        h = j["result"]
        hunt[name] = {**h, "lost_rate": _rate(h["lost"], h["iterations"])}
        if h["errors"]:
            res["errors"].append(f"futex hunt ({name}): {h['errors']} futex call(s) failed")
        if h["aborted"]:
            res["incomplete"].append(f"futex hunt ({name}): aborted after {h['iterations']} iterations (the waiter process "
                                     "died, or one side waited for the other for more than 2 s past the time budget; waiter "
                                     f"status {h['child_status']})")
        if name == "shipped" and h["lost"]:
            res["violations"]["futex hunt shipped lost wake-ups"] = h["lost"]
            res["examples"].append(f"futex hunt (F6N, F6W): {h['lost']} lost wake-up(s) with the shipped fences in {h['iterations']} "
                                   f"iterations (the waiter slept past the publish, the notifier saw no waiter)")
        if h["late"]:
            res["warnings"].append(f"futex hunt ({name}): {h['late']} sleep(s) ended by the {HUNT_SLEEP_TIMEOUT_S * 1e3:.0f} ms timeout with the "
                                   "flag set although the notifier saw the waiter and woke it: a wake delayed by scheduling, not a lost one")
        if name == "control" and h["lost"] == 0:
            res["notes"].append(f"futex hunt control of F6N: no lost wake-up in {h['iterations']} iterations "
                                f"({h['sleeps']} sleeps), so F6N was not exercised by the hunt here"
                                + _busy(_rate(h["yielded"], h["iterations"])))
    res["hunt"] = hunt


def run_fences(sc: Scenario, *, quick: bool = False, scale: float = 1.0, progress=None) -> dict:
    """Run the ``fences`` scenario; a result dict like the message scenarios' (``kind`` "fences")."""
    t0 = time.monotonic()
    iterations = max(1, int((sc.quick_iterations if quick else sc.iterations) * scale))
    hunt_budget = (sc.quick_duration if quick else sc.duration) * scale * 0.15
    res = {
        "name": sc.name, "kind": "fences", "description": sc.description, "stresses": sc.stresses, "source": sc.source,
        "verdict": "PASS", "quick": quick, "reason": None, "iterations": iterations, "rows": [], "hunt": {},
        "violations": {}, "examples": [], "errors": [], "warnings": [], "notes": [], "incomplete": [],
    }
    litmus, why = _load_litmus()
    build = litmus.build_info() if litmus is not None else None
    if build is not None and litmus is not None:
        build["file"] = litmus.__file__
    res["machine"] = machine_facts(build)
    if litmus is None:
        why_not = why
    elif usable_cpus() < 2:
        why_not = (f"only {usable_cpus()} CPU is available to this process (online cores: {res['machine']['online_cores']}): "
                   "two threads cannot run at the same time, so no reordering can be observed (the test cannot race)")
    else:
        why_not = None
    if why_not is not None:
        res.update(verdict=NOT_RUN, reason=why_not, wall_s=round(time.monotonic() - t0, 3))
        return res
    if build["dropped"].strip():
        res["errors"].append(f"this build of ringcast._litmus has test-only fence switches compiled in (dropped: "
                             f"{build['dropped'].strip()}): it is not a shipped build")
    shapes = litmus.shapes()
    for s in shapes:
        s["points"] = list(s["points"])
    jobs = _jobs(shapes, iterations, hunt_budget)
    span = sum(sc.plan(quick, scale))
    stop_by = t0 + 2 * span + 2.0  # the child starts no job after this and cuts the last one short
    done, errors = _run_child(jobs, stop_by, stop_by + sc.timeout, progress, sc.name, span, t0)
    res["errors"] += errors
    if len(done) < len(jobs) and not errors:
        res["incomplete"].append(f"the litmus jobs ran out of time ({stop_by - t0:.0f}s): {len(done)} of {len(jobs)} finished")
    _summarise(shapes, done, res)
    if res["violations"] or res["errors"]:
        res["verdict"] = "FAIL"
    elif res["incomplete"]:  # load, not a fence: no forbidden outcome in what ran, and it says what did not
        res["reason"] = ("incomplete: " + "; ".join(res["incomplete"]) + ". This machine was too busy for the jobs' time "
                         "budget: rerun it on a less loaded machine, or with more time (--scale)")
    res["wall_s"] = round(time.monotonic() - t0, 3)
    return res


# ------------------------------------------------------------------------------------ report --

def _n(x) -> str:
    return "-" if x is None else str(x)


def _rate_s(r) -> str:
    if r is None:
        return "-"
    return "0 (not seen)" if r == 0 else f"{r:.2e}"


def _table(res: dict) -> tuple[list[str], list[list[str]]]:
    head = ["shape", "fence", "iterations", "forbidden shipped", "forbidden control", "control rate", "sides met"]
    rows = [[r["shape"], r["fence"], _n(r["shipped_iterations"]) + ("" if r["control_iterations"] == r["shipped_iterations"] else f" / {_n(r['control_iterations'])}"),
             _n(r["shipped_forbidden"]), _n(r["control_forbidden"]), _rate_s(r["control_rate"]), _met(r["control_yielded"])] for r in res["rows"]]
    s, c = res["hunt"].get("shipped"), res["hunt"].get("control")
    if s or c:
        it = _n(s and s["iterations"]) + ("" if c and s and c["iterations"] == s["iterations"] else f" / {_n(c and c['iterations'])}")
        rows.append(["futex hunt (lost wake-ups)", "F6N", it, _n(s and s["lost"]), _n(c and c["lost"]), _rate_s(c and c["lost_rate"]),
                     _met(c and _rate(c["yielded"], c["iterations"]))])
    return head, rows


def _met(yielded) -> str:
    """The share of the control's iterations in which neither side had to give up its CPU first."""
    return "-" if yielded is None else f"{(1 - yielded) * 100:.0f}%"


def _machine_line(res: dict) -> str:
    m = res["machine"]
    b = m.get("extension") or {}
    ext = (f"; extension: {b['compiler']}, {b['arch']}; fence = {b['fence']}, F6N = {b['fence_load_u32']}, F6W = {b['fetch_add_u32']}"
           if b else "; extension: not built")
    return f"{m['cpu_model']}, {m['arch']}, {m['online_cores']} online cores ({m['usable_cores']} usable), {m['kernel']}{ext}"


def _hunt_line(res: dict) -> list[str]:
    out = []
    for name, h in res["hunt"].items():
        out.append(f"futex hunt {name}: {h['iterations']} iterations, {h['sleeps']} sleeps, {h['rechecks']} re-check hits, "
                   f"{h['wakes']} wakes ({h['woken']} woken), {h['timeouts_flag_set']} sleeps ended by timeout with the flag set "
                   f"({h['lost']} lost: the notifier saw no waiter; {h['late']} late wakes)")
    return out


def fences_lines(res: dict) -> list[str]:
    """The scenario as plain text (the summary printed by ``ringcast stress``)."""
    out = [f"fences: {res['verdict']}" + (f" - {res['reason']}" if res["reason"] else "") + f"  [{_machine_line(res)}]"]
    if res["reason"]:
        return out
    head, rows = _table(res)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    out.append("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    out += _hunt_line(res)
    out += [f"note: {n}" for n in res["notes"]]
    return out


def fences_markdown(res: dict) -> list[str]:
    lines = [f"## {res['name']} - {res['verdict']}", "", res["description"], "", f"*Stresses:* {res['stresses']}", "",
             f"Machine: {_machine_line(res)}.", ""]
    if res["reason"]:
        return lines + [f"**{NOT_RUN}:** {res['reason']}", ""]
    head, rows = _table(res)
    lines += ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows] + [""]
    lines += [f"- {x}" for x in _hunt_line(res)] + [""]
    if res["notes"]:
        lines += ["Notes:", ""] + [f"- {n}" for n in res["notes"]] + [""]
    for what, title in (("examples", "**Forbidden outcomes with the shipped fences:**"), ("errors", "**Errors:**"), ("warnings", "Warnings:")):
        if res[what]:
            lines += [title, ""] + [f"- {e}" for e in res[what]] + [""]
    return lines
