"""Running TLC: the command line, a model's cfg rendered or rewritten, TLC's output read back.

The one place that knows TLC's command line (:func:`tlc_prefix`, :func:`tlc_command`), how a
model's ``.cfg`` is written (:mod:`.models`: rendered from ``spec/models.json``, into the run's
temporary folder) and rewritten (:func:`rewrite_cfg`: constants, INIT/NEXT, invariants,
properties) and
what TLC prints (:func:`run_tlc` -> :class:`Outcome`: exit status, errors, the violated
invariant or property, distinct states, the error trace's states). Used by ``ringcast spec`` and
``tools/tlc.py`` (:mod:`ringcast_lab.tlc.cli`: every model of ``spec/models.json``) and by trace
validation (:mod:`ringcast_lab.trace.tracecheck`). Imports nothing of the protocol.

The spec folder is the one shipped in the package (``ringcast_lab._bundled``) unless a caller passes
its own (``tools/tlc.py`` passes the checkout's ``spec/``).
"""
from __future__ import annotations

import os
import re
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .find import TLC_VERSION as TLC_VERSION
from .models import load_manifest as load_manifest
from .models import model_cfg as model_cfg
from .models import model_constants as model_constants
from .models import EXPECTABLE as EXPECTABLE
from .models import render_cfg as render_cfg
from .models import spec_dir as spec_dir

# TLC's exit statuses (tlc2.output.EC.ExitStatus in TLC 2.15).
EXIT_NAMES = {
    0: "ok",
    10: "assumption",
    11: "deadlock",
    12: "safety",
    13: "liveness",
    14: "assert",
    75: "spec_eval_failure",
    76: "safety_eval_failure",
    77: "liveness_eval_failure",
    150: "spec_parse_error",
    151: "config_parse_error",
    152: "statespace_too_large",
    153: "system_error",
    255: "error",
}
def exit_name(code: int | None) -> str:
    """Map a TLC exit status to a result name."""
    if code is None:
        return "timeout"
    return EXIT_NAMES.get(code, f"exit_{code}")


def select(models: list[dict], names: list[str] | None) -> list[dict]:
    if not names:
        return list(models)
    by = {m["name"]: m for m in models}
    unknown = [n for n in names if n not in by]
    if unknown:
        raise KeyError(", ".join(unknown))
    return [by[n] for n in names]


# -------------------------------------------------------------------------- TLC's command line --
# Reproducible liveness results.  TLC checks temporal properties on the partial state graph
# whenever its periodic work finds the graph grown, at times that depend on the machine's load,
# and once more on the complete graph; "-lncheck final" keeps only the check on the complete
# graph, so a liveness violation is found after exploring every state and its distinct-state
# count is the model's, compared like any other (evict_keeps_clearing: 1981, where a loaded run
# without it stopped at 1382).  Which counterexample that check finds depends on the fingerprint
# function, which TLC picks at random per run unless "-fp" names one: with both, every run
# prints the same trace (evict_off: 13 states each time; 13, 14 or 28 with random fingerprints).
LIVENESS_ONCE = ["-lncheck", "final"]
FINGERPRINT = ["-fp", "0"]


# Small models: a serial GC and the C1 JIT only halve TLC's CPU time.  From about 10^4 states on,
# C2 pays for its warm-up (measured with TLC 2.15, one worker: ring_correct, 1,541 states, 3.6 s
# with C1 only, 6.4 s with C2; relaxed_code_n3, 24,218 states, 47 s and 29 s; park_relaxed_code,
# 106,311 states, 142 s and 83 s).
SMALL_JVM = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")
BIG_JVM = ("-XX:+UseSerialGC",)
BIG_STATES = 10_000  # a manifest model with at least this many distinct states runs with BIG_JVM


def tlc_prefix(java: str, jar: Path | str, workers: int, metadir: str, tmpdir: str,
               jvm: tuple = SMALL_JVM) -> list[str]:
    """The start of every TLC command line: the JVM, its flags, the jar, workers and metadir."""
    return [java, *jvm, "-Xmx1g", f"-Djava.io.tmpdir={tmpdir}", "-cp", str(jar), "tlc2.TLC",
            "-workers", str(workers), "-metadir", metadir]


def tlc_command(java: str, jar: Path | str, model: dict, workers: int, metadir: str, tmpdir: str,
                cfg: Path | str, cfg_text: str) -> list[str]:
    """The command line of one manifest model (run in the spec folder); ``cfg``: the file TLC
    reads its configuration from, whose text is ``cfg_text`` (:func:`render_cfg`'s)."""
    jvm = BIG_JVM if model.get("distinct", 0) >= BIG_STATES else SMALL_JVM
    cmd = tlc_prefix(java, jar, workers, metadir, tmpdir, jvm) + FINGERPRINT
    if cfg_properties(cfg_text):
        cmd += LIVENESS_ONCE
    cmd += ["-config", str(cfg)]
    if model.get("deadlock") is False:
        cmd.append("-deadlock")          # TLC 2.15: -deadlock turns the check OFF
    cmd.append(model["module"])
    return cmd


# ------------------------------------------------------------------------------- cfg rewriting --
_CONST_RE = re.compile(r"^(\s+)(\w+)(\s*)(=|<-)(\s*)(.*)$")


def rewrite_cfg(text: str, *, constants: dict | None = None, init_next: tuple[str, str] | None = None,
                invariants: str | None = None, add_invariants: str = "", properties: str | None = None,
                header: str = "") -> str:
    """A TLC ``.cfg`` text with changes: ``constants`` {name: TLA+ value} replace the values
    assigned in the CONSTANTS section (each must be assigned there: ValueError otherwise; the
    ``=`` / ``<-`` of the line is kept); ``init_next`` replaces SPECIFICATION by INIT/NEXT;
    ``invariants`` / ``properties`` (space separated, "" for none) replace those lines;
    ``add_invariants`` appends to INVARIANTS; ``header`` is a first comment line."""
    constants = {k: str(v) for k, v in (constants or {}).items()}
    out, seen = ([f"\\* {header}"] if header else []), set()
    for line in text.splitlines():
        m = _CONST_RE.match(line)
        if m and m.group(2) in constants:
            line = f"{m.group(1)}{m.group(2)} {m.group(4)} {constants[m.group(2)]}"
            seen.add(m.group(2))
        elif init_next is not None and re.match(r"^SPECIFICATION\b", line):
            line = f"INIT {init_next[0]}\nNEXT {init_next[1]}"
        elif re.match(r"^INVARIANTS?\b", line) and (invariants is not None or add_invariants):
            names = line.split()[1:] if invariants is None else invariants.split()
            names += add_invariants.split()
            line = ("INVARIANTS " + " ".join(names)) if names else ""
        elif properties is not None and re.match(r"^PROPERT(?:Y|IES)\b", line):
            line = ("PROPERTIES " + properties) if properties else ""
        out.append(line)
    if seen != set(constants):
        raise ValueError(f"the cfg does not assign {sorted(set(constants) - seen)}: the spec's constants changed; "
                         "update the caller's constants to the spec's")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------------------- TLC's output --
@dataclass
class Outcome:
    """What one TLC run printed, read back."""

    code: int | None  # TLC's exit status; None: killed at the timeout
    output: str = field(repr=False)
    errors: list[str]  # the text after each "Error: "
    violated: str | None  # an invariant or action property's name, "temporal", "deadlock"
    distinct: int | None  # distinct states found
    seconds: float = 0.0

    @property
    def result(self) -> str:
        return exit_name(self.code)

    @property
    def lines(self) -> list[str]:
        return self.output.splitlines()

    @property
    def no_error(self) -> bool:
        """TLC explored everything and found no error, within its time: a run stopped at its
        timeout never passes, even if it completed while it was given the grace to print its
        thread dump (run_tlc)."""
        return self.code is not None and "No error has been found" in self.output

    def last_state(self) -> dict:
        """The variables of the error trace's last state (strings as TLC prints them)."""
        states = [v for _, v in parse_trace(self.lines) if v]
        return states[-1] if states else {}


def parse_output(out: str, code: int | None, seconds: float = 0.0) -> Outcome:
    lines = out.splitlines()
    distinct = None
    for line in lines:
        m = re.search(r"([\d,]+) distinct states? (?:found|generated)", line)
        if m and "initial" not in line:
            distinct = int(m.group(1).replace(",", ""))
    violated = None
    errors = [l[len("Error: "):] for l in lines if l.startswith("Error: ")]
    for e in errors:
        m = re.match(r"Invariant (\w+) is violated", e) or re.match(r"Action property (\w+)", e)
        if m:
            violated = m.group(1)
        if e.startswith("Temporal properties were violated"):
            violated = "temporal"
        if e.startswith("Deadlock reached"):
            violated = "deadlock"
    return Outcome(code, out, errors, violated, distinct, seconds)


def run_tlc(cmd: list[str], cwd: Path | str, timeout: float) -> Outcome:
    """Run a TLC command line; a run past ``timeout`` is stopped (:func:`stop_with_dump`: code
    None) and what it printed is kept, so a run that hangs says where."""
    start = time.monotonic()
    with subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as p:
        try:
            out, _ = p.communicate(timeout=timeout)
            code = p.returncode
        except subprocess.TimeoutExpired:
            code, out = None, stop_with_dump(p, DUMP_GRACE)
    return parse_output(out, code, time.monotonic() - start)


#: seconds a TLC run stopped at its timeout is given to print its thread dump (run_tlc)
DUMP_GRACE = 2.0


def stop_with_dump(p: subprocess.Popen, grace: float) -> str:
    """Stop a JVM whose output ``p`` pipes (text): SIGQUIT first, on which a JVM prints every
    thread's stack and goes on (best effort: not where SIGQUIT reaches it ignored), ``grace``
    seconds for that, then SIGKILL. Returns everything it printed that was not read yet."""
    p.send_signal(signal.SIGQUIT)
    try:
        out, _ = p.communicate(timeout=grace)  # it exits only if it was about to
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()  # everything it printed, the dump included
    return out


STATE_RE = re.compile(r"^State (\d+): (.*)$")
ACTION_RE = re.compile(r"^<(\w+)(?:\([^)]*\))?\s+line \d+")


def parse_trace(lines: list[str]) -> list[tuple[str, dict]]:
    """Parse TLC's error trace into [(label, {var: value})]."""
    states: list[tuple[str, dict]] = []
    cur = None
    var = None
    for line in lines:
        m = STATE_RE.match(line)
        if m:
            label = m.group(2).strip()
            a = ACTION_RE.match(label)
            if a:
                label = a.group(1)
            elif label.startswith("<Initial predicate>"):
                label = "Init"
            cur = {}
            var = None
            states.append((label, cur))
            continue
        if cur is None:
            continue
        s = line.rstrip()
        if s.startswith("/\\ ") and " = " in s:
            var, val = s[3:].split(" = ", 1)
            cur[var.strip()] = val.strip()
        elif s == "":
            var = None
        elif var is not None and s.startswith(" "):
            cur[var] = cur[var] + " " + s.strip()
        elif s.startswith(("Back to state", "Stuttering", "State ")) or \
                s.endswith("Stuttering"):
            states.append((s, {}))
            cur, var = None, None
        else:
            cur, var = None, None
    return states


def split_top(s: str, sep: str) -> list[str]:
    """Split s at sep where no bracket or string is open."""
    parts, depth, start, k, instr = [], 0, 0, 0, False
    while k < len(s):
        ch = s[k]
        if instr:
            if ch == "\\":
                k += 1
            elif ch == '"':
                instr = False
        elif ch == '"':
            instr = True
        elif s.startswith("<<", k):
            depth += 1
            k += 1
        elif s.startswith(">>", k):
            depth -= 1
            k += 1
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif depth == 0 and s.startswith(sep, k):
            parts.append(s[start:k])
            k += len(sep)
            start = k
            continue
        k += 1
    parts.append(s[start:])
    return [p.strip() for p in parts]


def as_function(value: str) -> dict | None:
    """Parse TLC's "(k1 :> v1 @@ k2 :> v2)" into {k1: v1, ...}, else None."""
    v = value.strip()
    if not (v.startswith("(") and v.endswith(")") and ":>" in v):
        return None
    inner = v[1:-1].strip()
    if len(split_top(inner, " @@ ")) == 0:
        return None
    out = {}
    for item in split_top(inner, " @@ "):
        kv = split_top(item, " :> ")
        if len(kv) != 2:
            return None
        out[kv[0]] = kv[1]
    return out


def changes(name: str, old: str | None, new: str) -> list[str]:
    """name = new, or name[k] = v for just the changed entries of a function."""
    if old is None:
        return [f"{name} = {new}"]
    fo, fn = as_function(old), as_function(new)
    if fo is not None and fn is not None and fo.keys() == fn.keys():
        out = []
        for k in fn:
            if fo[k] != fn[k]:
                out += changes(f"{name}[{k}]", fo[k], fn[k])
        return out
    return [f"{name} = {new}"]


def format_trace(lines: list[str]) -> str:
    """Counterexample, condensed: per state only the variables that changed."""
    out = []
    prev: dict = {}
    for n, (label, vals) in enumerate(parse_trace(lines), 1):
        if not vals:
            out.append(f"      -- {label}")
            continue
        if not prev:
            out.append(f"  {n:>3} {label}")
            for k in sorted(vals):
                out.append(f"        {k} = {vals[k]}")
        else:
            body = []
            for k in sorted(vals):
                if prev.get(k) != vals[k]:
                    body += changes(k, prev.get(k), vals[k])
            out.append(f"  {n:>3} {label:<19} " + "; ".join(body))
        prev = {**prev, **vals}
    return "\n".join(out)


def cfg_properties(cfg: str) -> list[str]:
    """The names after PROPERTY/PROPERTIES in a .cfg text (one line each, as spec/ writes them)."""
    out = []
    for line in cfg.splitlines():
        line = line.split("\\*", 1)[0]
        if re.match(r"^PROPERT(Y|IES)\b", line):
            out += line.split()[1:]
    return out


# -------------------------------------------------------------------------------- one model --
def name_temporal(model: dict, java: str, jar: Path, workers: int, spec: Path | str | None = None) -> str:
    """TLC 2.15 says only "Temporal properties were violated": find which, by checking each
    property of the model's cfg alone (only models with a liveness violation pay this)."""
    props = model["config"]["properties"].split()
    if len(props) == 1:
        return props[0]
    bad = [p for p in props
           if run_model(model, java, jar, workers, invariants="", properties=p,
                        name_temporal_props=False, spec=spec)["result"] == "liveness"]
    return ",".join(bad) or "temporal"


def run_model(model: dict, java: str, jar: Path, workers: int,
              invariants: str | None = None, properties: str | None = None,
              name_temporal_props: bool = True, spec: Path | str | None = None) -> dict:
    """Run one manifest model (loaded by :func:`load_manifest`) in the spec folder ``spec``, its
    cfg rendered into the run's temporary folder.  ``invariants``/``properties`` (space
    separated; "" for none) replace the model's; a violated temporal property is reported by
    name (``violated``)."""
    spec = spec_dir(spec)
    with tempfile.TemporaryDirectory(prefix="ringcast-tlc-") as tmp:
        metadir = os.path.join(tmp, "states")
        javatmp = os.path.join(tmp, "java")
        os.makedirs(javatmp)
        text = render_cfg(model, invariants=invariants, properties=properties)
        cfg = Path(tmp) / f"{model['name']}.cfg"
        cfg.write_text(text)
        res = run_tlc(tlc_command(java, jar, model, workers, metadir, javatmp, cfg, text), spec, model["timeout"])
    violated = res.violated
    if violated == "temporal" and name_temporal_props:
        violated = name_temporal(model, java, jar, workers, spec)
    return dict(name=model["name"], code=res.code, result=res.result, violated=violated, distinct=res.distinct,
                errors=res.errors, seconds=res.seconds, output=res.output, lines=res.lines)


def check(model: dict, res: dict, count_exact: bool) -> list[str]:
    """Differences between a run and the manifest (empty when it matches)."""
    diffs = []
    if res["result"] != model["expect"]:
        diffs.append(f"result {res['result']} (expected {model['expect']})")
    elif model.get("violated") and res["violated"] != model["violated"]:
        diffs.append(f"violated {res['violated']} (expected {model['violated']})")
    want = model.get("distinct")
    # With one worker the count is exact, a liveness violation's too (LIVENESS_ONCE).
    if want is not None and count_exact and res["distinct"] != want:
        diffs.append(f"distinct states {res['distinct']} (expected {want})")
    return diffs


def describe(model: dict, res: dict) -> str:
    r = res["result"] + (f" ({res['violated']})" if res["violated"] and
                         res["result"] != "ok" else "")
    d = res["distinct"] if res["distinct"] is not None else "?"
    return f"{model['name']}: {r}, {d} distinct states, {res['seconds']:.1f}s"
