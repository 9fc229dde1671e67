"""The ``fences`` scenario of ``ringcast stress``: litmus tests of the fence shapes (all points but F8), on this CPU.

The message-level scenarios cannot see a missing fence: between two steps of the protocol they
run whole messages (pickling, waits, system calls), so the hardware's reordering window is almost
never hit. This scenario runs the C litmus tests of ``ringcast_lab._litmus`` (src/ringcast_lab/litmus/_litmus.c),
built on the very primitives the C steps of ``ringcast._protocol`` run
(src/ringcast/core/rc_fences.h), in tight loops:

* each shape (eventcount, mp, mp_readflag, rtr; docs/spec.md "Litmus tests") with the shipped
  fences: any forbidden outcome is a FAIL naming the shape and the count;
* the control of each fence point of the shape (that fence replaced by a compiler-only barrier):
  how often this CPU produces the forbidden outcome when nothing stops it. Whether the
  architecture allows that outcome at all comes from its formal model (herd7's verdicts,
  :mod:`ringcast_lab.stress.arch_model`); with it, the power of the shipped run (the iterations it
  needed to miss a broken fence of the control's rate with probability <= 1e-6);
* the futex hunt: the parking protocol with the real futex between two processes; a sleep that
  ended by its timeout while the flag was set and the notifier had seen no waiter is a lost
  wake-up (FAIL with the shipped fences).

The jobs run in a child process (:mod:`ringcast_lab.stress.litmus_child`, its own process group),
killed with the waiter its futex hunt forks if it is still running at the scenario's deadline.
Verdicts: FAIL (a forbidden outcome or lost wake-up with the shipped fences, or an error);
INCONCLUSIVE (none, but a control the architecture allows was not seen, or jobs did not finish:
the run could not have caught that fence's absence; the reason says what to do); PASS (none, and
every allowed control was seen at least once). ``until_seen`` (``--until-seen SECONDS``) runs the
unseen allowed controls on until they show, then the shipped fences at least as long. Without the
C extension, or with fewer than two CPUs to run on, the scenario reports NOT RUN and why; it never
passes silently.
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

from .arch_model import HERD_VERSION, HUNT_SHAPE, MODELS, VERDICTS, control_verdict, model_name, rmw_variant
from .scenario import Scenario
from .stats import MISS_PROBABILITY, add_counts, iterations_for_power

__all__ = ["run_fences", "machine_facts", "new_result", "judge", "merge_until_seen", "arch_model_facts", "PASS", "FAIL", "INCONCLUSIVE", "NOT_RUN", "WHAT_TO_DO"]

PASS, FAIL, INCONCLUSIVE, NOT_RUN = "PASS", "FAIL", "INCONCLUSIVE", "NOT RUN"
WHAT_TO_DO = ("Rerun it on an idle machine, or run until every allowed control shows: "
              "ringcast stress --only fences --until-seen 60")
_FINDINGS = ("violations", "examples", "errors", "warnings", "notes", "incomplete", "unseen")
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


def _cpu_features() -> str:
    """The CPU's feature flags (/proc/cpuinfo ``Features``, Arm; ``flags``, x86), or ""."""
    try:
        m = re.search(r"^(?:Features|flags)\s*:\s*(.+)$", Path("/proc/cpuinfo").read_text(), re.M)
    except OSError:
        return ""
    return m.group(1) if m else ""


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
        _litmus = importlib.import_module("ringcast_lab._litmus")
    except ImportError as e:
        return None, (
            f"the C extension ringcast_lab._litmus is not built ({e}); the litmus tests need it. Install a C "
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
        [sys.executable, "-m", "ringcast_lab.stress.litmus_child", json.dumps(jobs), repr(stop_by)],
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
            "this machine is busy, so the two sides rarely raced)")


def _judge(res: dict, what: str, entry: dict, model: str | None, forbidden: int | None, iterations: int | None,
           shipped_iterations: int | None, yielded: float | None) -> None:
    """The architecture's verdict on a control, whether it was seen, and the shipped run's power
    (fields of ``entry``, in place); an allowed control not seen goes to ``res["unseen"]``."""
    arch = res["model"]["arch"] or res["machine"]["arch"]
    entry["model"] = model
    entry["allowed"] = model != "Never"
    entry["seen"] = None if forbidden is None else forbidden > 0
    rate = _rate(forbidden, iterations) if forbidden else None
    needed = iterations_for_power(rate) if rate else None
    entry["power"] = None if needed is None else {
        "rate": rate, "miss": MISS_PROBABILITY, "needed": needed, "ran": shipped_iterations,
        "enough": shipped_iterations is not None and shipped_iterations >= needed}
    if entry["seen"] and not entry["allowed"]:
        res["warnings"].append(f"{what}: seen {forbidden} time(s) although {res['model']['file']} forbids it with the shape's "
                               "other fence in place (herd7): either that fence is missing from this build (see the shipped "
                               f"column) or this CPU does not behave as {arch}'s model says; please report it with summary.json")
    elif entry["seen"] is False and not entry["allowed"]:
        res["notes"].append(f"{what}: not seen in {iterations} iterations, as expected: {res['model']['file']} forbids "
                            f"this outcome on {arch} even without the fence (herd7)")
    elif not entry["seen"] and entry["allowed"]:
        why = (f"not seen in {iterations} iterations" if forbidden is not None else "did not run")
        allowed = f"{res['model']['file']} allows it (herd7)" if model else f"no model table for {arch}: counted as allowed"
        res["unseen"].append(f"{what} ({allowed}): {why}" + _busy(yielded))


def _summarise(shapes: list[dict], done: list[dict], res: dict, table: dict | None) -> None:
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
            for k in ("first_seen_at", "shipped_after_seen"):
                row[k] = (ctl or {}).get(k)
            _judge(res, f"{s['shape']} control of {p}", row, control_verdict(table, s["shape"], p, res["model"]["variant"]), row["control_forbidden"],
                   row["control_iterations"], row["shipped_iterations"], row["control_yielded"])
            rows.append(row)
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
    c, s = hunt.get("control") or {}, hunt.get("shipped") or {}
    _judge(res, "futex hunt control of F6N", c, control_verdict(table, *HUNT_SHAPE, res["model"]["variant"]), c.get("lost"), c.get("iterations"),
           s.get("iterations"), _rate(c.get("yielded", 0), c.get("iterations")))
    res["hunt"] = hunt


def _verdict(res: dict) -> None:
    if res["violations"] or res["errors"]:
        res["verdict"] = FAIL
        return
    if not (res["unseen"] or res["incomplete"]):
        return
    res["verdict"] = INCONCLUSIVE
    why = []
    if res["unseen"]:
        names = ", ".join(u.split(" (")[0].replace(" control of ", " ") for u in res["unseen"])
        why.append(f"allowed control(s) not seen: {names}, so this run could not have caught the absence of those fences")
    if res["incomplete"]:
        why.append("incomplete: " + "; ".join(res["incomplete"]))
    res["reason"] = f"no forbidden outcome with the shipped fences, but {'; '.join(why)}. {WHAT_TO_DO}"


def _missing_shipped(jobs: list[dict], done: list[dict]) -> list[dict]:
    """The shipped runs (litmus and futex hunt) among ``jobs`` that did not finish."""
    ran = {(j["kind"], j.get("shape"), j["control"]) for j in done}
    return [j for j in jobs if j["control"] in (None, False) and (j["kind"], j.get("shape"), j["control"]) not in ran]


def _until_jobs(res: dict, deadline: float, chunk: int, hunt_chunk: int) -> list[dict]:
    """--until-seen: one job per allowed control not seen yet: that control in chunks until it shows or
    ``deadline``, then the shipped fences of its shape until they ran at least as many iterations."""
    jobs = []
    for row in res["rows"]:
        if row["allowed"] and not row["seen"]:
            jobs.append({"kind": "until", "shape": row["shape"], "control": row["fence"], "deadline": deadline,
                         "chunk": chunk, "control_done": row["control_iterations"] or 0,
                         "shipped_done": row["shipped_iterations"] or 0})
    c, s = res["hunt"].get("control", {}), res["hunt"].get("shipped") or {}
    if c.get("allowed") and not c.get("seen"):
        jobs.append({"kind": "hunt_until", "deadline": deadline, "chunk": hunt_chunk, "sleep_timeout_s": HUNT_SLEEP_TIMEOUT_S,
                     "control_done": c.get("iterations") or 0, "shipped_done": s.get("iterations", 0)})
    return jobs


def merge_until_seen(done: list[dict], extra: list[dict]) -> None:
    """Add the --until-seen jobs' iterations and outcomes to the first run's jobs (in place)."""
    def job(kind: str, shape, control) -> dict:
        for j in done:
            if j["kind"] == kind and j.get("shape") == shape and j["control"] == control:
                return j
        done.append({"kind": kind, "shape": shape, "control": control, "result": {}})
        return done[-1]

    for e in extra:
        kind, shape = ("hunt", None) if e["kind"] == "hunt_until" else ("litmus", e["shape"])
        ctl = job(kind, shape, True if kind == "hunt" else e["control"])
        add_counts(ctl["result"], e["result"]["control"])
        if e["result"].get("shipped"):
            add_counts(job(kind, shape, False if kind == "hunt" else None)["result"], e["result"]["shipped"])
        if e["result"]["first_seen_at"] is not None:
            ctl["result"]["first_seen_at"] = e["result"]["first_seen_at"]
            ctl["result"]["shipped_after_seen"] = (e["result"].get("shipped") or {}).get("iterations", 0)


def arch_model_facts(machine: dict, cpu_features: str = "") -> dict:
    """Which table of :mod:`ringcast_lab.stress.arch_model` applies to this machine (``arch``, the
    model ``file``, ``herd``'s version: None where there is none) and, on AArch64, the RMW
    ``variant`` the build runs."""
    arch = model_name(machine["arch"])
    if arch not in VERDICTS:
        return {"arch": None, "file": None, "herd": None, "variant": None}
    build = machine.get("extension") or {}
    variant = rmw_variant(build.get("fetch_add_u32", ""), cpu_features) if arch == "AArch64" else None
    return {"arch": arch, "file": MODELS[arch], "herd": HERD_VERSION, "variant": variant}


def new_result(sc: Scenario, *, quick: bool, iterations: int, until_seen: float = 0.0) -> dict:
    """A result dict before anything ran (``verdict`` PASS, empty findings)."""
    return {
        "name": sc.name, "kind": "fences", "description": sc.description, "stresses": sc.stresses, "source": sc.source,
        "verdict": PASS, "quick": quick, "reason": None, "iterations": iterations, "until_seen_s": until_seen, "rows": [],
        "hunt": {}, "machine": None, "model": None, "violations": {}, **{k: [] for k in _FINDINGS[1:]},
    }


def judge(res: dict, shapes: list[dict], done: list[dict], table: dict | None) -> dict:
    """Fill in a result's rows, futex hunt, findings and verdict from the finished jobs (as the
    child prints them) and the architecture's table (None: every control counts as allowed)."""
    _summarise(shapes, done, res, table)
    _verdict(res)
    return res


def run_fences(sc: Scenario, *, quick: bool = False, scale: float = 1.0, progress=None, until_seen: float = 0.0) -> dict:
    """Run the ``fences`` scenario; a result dict like the message scenarios' (``kind`` "fences").

    ``until_seen`` > 0 (``--until-seen SECONDS``): after the run, every control that the
    architecture allows and that did not show runs on for up to that many seconds in all, until it
    shows; then the shipped fences of its shape run at least as many iterations as that took."""
    t0 = time.monotonic()
    iterations = max(1, int((sc.quick_iterations if quick else sc.iterations) * scale))
    hunt_budget = (sc.quick_duration if quick else sc.duration) * scale * 0.15
    res = new_result(sc, quick=quick, iterations=iterations, until_seen=until_seen)
    litmus, why = _load_litmus()
    build = litmus.build_info() if litmus is not None else None
    if build is not None and litmus is not None:
        build["file"] = litmus.__file__
    res["machine"] = machine_facts(build)
    table = VERDICTS.get(model_name(res["machine"]["arch"]) or "")
    res["model"] = arch_model_facts(res["machine"], _cpu_features())
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
        res["errors"].append(f"this build of ringcast_lab._litmus has test-only fence switches compiled in (dropped: "
                             f"{build['dropped'].strip()}): it is not a shipped build")
    shapes = litmus.shapes()
    for s in shapes:
        s["points"] = list(s["points"])
    jobs = _jobs(shapes, iterations, hunt_budget)
    span = sum(sc.plan(quick, scale))
    stop_by = t0 + 2 * span + 2.0  # the child starts no job after this and cuts the last one short
    done, errors = _run_child(jobs, stop_by, stop_by + sc.timeout, progress, sc.name, span, t0)
    res["errors"] += errors
    if until_seen > 0 and not res["errors"]:
        probe = {**res, **{k: type(res[k])() for k in _FINDINGS}}  # which controls are allowed and unseen so far
        _summarise(shapes, done, probe, table)
        t1 = time.monotonic()
        # the shipped runs the first run had no time for, then each unseen allowed control until t1 + until_seen
        # and its shipped run for as long again at most
        extra = [{**j, "budget_s": min(j["budget_s"], until_seen)} for j in _missing_shipped(jobs, done)]
        extra += _until_jobs(probe, t1 + until_seen, min(iterations, 1_000_000), 5_000) if not probe["violations"] else []
        if extra:
            stop2 = t1 + 2 * until_seen + 2.0
            got, errors = _run_child(extra, stop2, stop2 + sc.timeout, progress, f"{sc.name} until seen", 2 * until_seen, t1)
            res["errors"] += errors
            done += [j for j in got if j["kind"] in ("litmus", "hunt")]
            merge_until_seen(done, [j for j in got if j["kind"] not in ("litmus", "hunt")])
            res["until_seen_jobs"] = [{k: v for k, v in j.items() if k != "deadline"} for j in got if j["kind"] not in ("litmus", "hunt")]
    if not res["errors"]:
        for j in _missing_shipped(jobs, done):
            what = f"{j['shape']} shipped" if j["kind"] == "litmus" else "futex hunt shipped"
            res["incomplete"].append(f"{what}: did not run (the litmus jobs ran out of time, {stop_by - t0:.0f}s)")
    judge(res, shapes, done, table)
    res["wall_s"] = round(time.monotonic() - t0, 3)
    return res
