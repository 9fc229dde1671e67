"""The ``fences`` scenario's result (:mod:`ringcast_lab.stress.fences`) as text and Markdown.

One row per shape and fence point: the shipped run's and the control's iterations and forbidden
outcomes, the control's rate, what the architecture's model says of the control (herd7's verdict,
:mod:`ringcast_lab.stress.arch_model`), whether it was seen (an allowed control not seen makes the
verdict INCONCLUSIVE), how often the two sides met, and the power of the shipped run: the
iterations it needed to miss a broken fence of the control's rate with probability at most 1e-6,
and whether it ran them.
"""

from __future__ import annotations

from .fences import NOT_RUN

__all__ = ["fences_lines", "fences_markdown"]


def _n(x) -> str:
    return "-" if x is None else str(x)


def _rate(n, iterations) -> float | None:
    return n / iterations if n is not None and iterations else None


def _rate_s(r) -> str:
    if r is None:
        return "-"
    return "0" if r == 0 else f"{r:.2e}"


def _seen(e: dict) -> str:
    """Whether a control showed, against what the architecture's model allows."""
    if e.get("seen") is None:
        return "did not run"
    if e["seen"]:
        return "seen" if e["allowed"] else "seen (model: Never!)"
    return "NOT SEEN" if e["allowed"] else "no (as the model says)"


def _power(p: dict | None) -> str:
    if not p:
        return "-"
    return f"needs {p['needed']:.1e}: " + ("ran" if p["enough"] else f"NOT ran ({_n(p['ran'])})")


def _model(res: dict, e: dict) -> str:
    return e.get("model") or ("(no table)" if not res["model"]["arch"] else "-")


def _table(res: dict) -> tuple[list[str], list[list[str]]]:
    arch = res["model"]["file"] or "model"
    head = ["shape", "fence", "iterations", "forbidden shipped", "forbidden control", "control rate", arch, "control seen",
            "sides met", "power (1e-6 miss)"]
    rows = [[r["shape"], r["fence"], _n(r["shipped_iterations"]) + ("" if r["control_iterations"] == r["shipped_iterations"] else f" / {_n(r['control_iterations'])}"),
             _n(r["shipped_forbidden"]), _n(r["control_forbidden"]), _rate_s(r["control_rate"]), _model(res, r), _seen(r),
             _met(r["control_yielded"]), _power(r["power"])] for r in res["rows"]]
    s, c = res["hunt"].get("shipped"), res["hunt"].get("control")
    if s or c:
        it = _n(s and s["iterations"]) + ("" if c and s and c["iterations"] == s["iterations"] else f" / {_n(c and c['iterations'])}")
        rows.append(["futex hunt (lost wake-ups)", "F6N", it, _n(s and s["lost"]), _n(c and c["lost"]), _rate_s(c and c["lost_rate"]),
                     _model(res, c or {}), _seen(c or {}), _met(c and _rate(c["yielded"], c["iterations"])), _power((c or {}).get("power"))])
    return head, rows


def _met(yielded) -> str:
    """The share of the control's iterations in which neither side had to give up its CPU first."""
    return "-" if yielded is None else f"{(1 - yielded) * 100:.0f}%"


def _machine_line(res: dict) -> str:
    m = res["machine"]
    b = m.get("extension") or {}
    ext = (f"; extension: {b['compiler']}, {b['arch']}; fence = {b['fence']}, F6N = {b['fence_load_u32']}, F6W = {b['fetch_add_u32']}"
           if b else "; extension: not built")
    mod = res.get("model") or {}
    model = (f"; model: {mod['file']} ({mod['herd']})" if mod.get("file")
             else f"; model: none for {m['arch']} (every control counts as allowed)")
    return f"{m['cpu_model']}, {m['arch']}, {m['online_cores']} online cores ({m['usable_cores']} usable), {m['kernel']}{ext}{model}"


def _hunt_line(res: dict) -> list[str]:
    out = []
    for name, h in res["hunt"].items():
        out.append(f"futex hunt {name}: {h['iterations']} iterations, {h['sleeps']} sleeps, {h['rechecks']} re-check hits, "
                   f"{h['wakes']} wakes ({h['woken']} woken), {h['timeouts_flag_set']} sleeps ended by timeout with the flag set "
                   f"({h['lost']} lost: the notifier saw no waiter; {h['late']} late wakes)")
    return out


def _until_lines(res: dict) -> list[str]:
    """What --until-seen did, per control it ran on."""
    if not res.get("until_seen_s"):
        return []
    out = []
    ran_on = {("futex hunt", "F6N") if j["kind"] == "hunt_until" else (j["shape"], j["control"]) for j in res.get("until_seen_jobs", [])}
    for e in [*res["rows"], {**res["hunt"].get("control", {}), "shape": "futex hunt", "fence": "F6N"}]:
        if e.get("first_seen_at") is not None:
            out.append(f"until-seen: {e['shape']} control of {e['fence']} first showed after {e['first_seen_at']} iterations; "
                       f"the shipped fences then ran {e['shipped_after_seen']} more")
        elif (e["shape"], e["fence"]) in ran_on:
            out.append(f"until-seen: {e['shape']} control of {e['fence']} still not seen after {_n(e.get('control_iterations', e.get('iterations')))} "
                       f"iterations in all ({res['until_seen_s']:g}s)")
    if not res.get("until_seen_jobs"):
        out.append(f"until-seen ({res['until_seen_s']:g}s): nothing to run on (every allowed control had shown)")
    return out


def fences_lines(res: dict) -> list[str]:
    """The scenario as plain text (the summary printed by ``ringcast stress``)."""
    out = [f"fences: {res['verdict']}" + (f" - {res['reason']}" if res["reason"] else "") + f"  [{_machine_line(res)}]"]
    if res["verdict"] == NOT_RUN:
        return out
    head, rows = _table(res)
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(head)]
    out.append("  ".join(h.ljust(w) for h, w in zip(head, widths)))
    out.append("  ".join("-" * w for w in widths))
    out += ["  ".join(v.ljust(w) for v, w in zip(r, widths)) for r in rows]
    out += _hunt_line(res) + _until_lines(res)
    out += [f"not seen: {n}" for n in res["unseen"]]
    out += [f"note: {n}" for n in res["notes"]]
    return out


def fences_markdown(res: dict) -> list[str]:
    lines = [f"## {res['name']} - {res['verdict']}", "", res["description"], "", f"*Stresses:* {res['stresses']}", "",
             f"Machine: {_machine_line(res)}.", ""]
    if res["verdict"] == NOT_RUN:
        return lines + [f"**{NOT_RUN}:** {res['reason']}", ""]
    if res["reason"]:
        lines += [f"**{res['verdict']}:** {res['reason']}", ""]
    head, rows = _table(res)
    lines += ["| " + " | ".join(head) + " |", "|" + "|".join("---" for _ in head) + "|"]
    lines += ["| " + " | ".join(r) + " |" for r in rows] + [""]
    lines += [f"- {x}" for x in _hunt_line(res) + _until_lines(res)] + [""]
    for what, title in (("unseen", "**Allowed controls not seen** (the run could not have caught these fences' absence):"),
                        ("notes", "Notes:"), ("examples", "**Forbidden outcomes with the shipped fences:**"),
                        ("errors", "**Errors:**"), ("warnings", "Warnings:")):
        if res[what]:
            lines += [title, ""] + [f"- {e}" for e in res[what]] + [""]
    return lines
