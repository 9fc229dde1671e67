#!/bin/sh
# Build GenMC 0.10.3 (the stateless model checker the verify/genmc/ harnesses run under) from the
# source archive in the shared tools folder, into a cache outside the clone, once per machine.
#
#   tools/build_genmc.sh            # prints the path of the genmc binary (builds it first if needed)
#
# Idempotent: when $CACHE/genmc exists and runs, nothing is built. The archive is looked up in
# $RINGCAST_SHARED/tools, then in a shared/tools folder next to the repository root or next to any
# folder above it (a worktree's main checkout included). Debian packages it needs are installed
# with apt-get (one `apt-get update` if a package is not found). Build recipe and why g++ (not
# clang++) is the C++ compiler: shared/tools/README.md. Concurrent runs serialise on a lock file.
#
# One patch (patch_freeze below): GenMC 0.10.3's interpreter stops at LLVM's `freeze` instruction
# ("Instruction not interpretable yet!"), which LLVM 15's JumpThreading pass (run by GenMC itself
# on the program under test) inserts for conditions such as `h == NULL || h(...) == 0 ? a : b` in
# the ringcast core. The interpreter has no poison values, so freeze is the identity; the patch
# executes it as such and carries the operand's dependencies (IMM tracks them).
# A second (patch_rmw_wrap): its atomic add/sub does not wrap at the access's width (a 32-bit
# `waiters += 0xFFFFFFFF` stores 4294967296); the patch masks the result to the access size.
# GenMC compiles its own include folder's absolute path into the binary, so it is built in place
# in $CACHE; the file $CACHE/.complete marks a finished build (a half-built folder is rebuilt).
set -eu

VERSION=0.10.3
ARCHIVE_NAME=genmc-$VERSION.tar.gz
CACHE_ROOT=${RINGCAST_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/ringcast-tools}
CACHE=$CACHE_ROOT/genmc-$VERSION
LLVM=/usr/lib/llvm-15
JOBS=${RINGCAST_BUILD_JOBS:-2}

log() { echo "build_genmc: $*" >&2; }

STAMP="genmc $VERSION + patch_freeze 1 + patch_rmw_wrap 1"
built() { [ "$(cat "$CACHE/.complete" 2>/dev/null)" = "$STAMP" ] && [ -x "$CACHE/genmc" ] && "$CACHE/genmc" --version >/dev/null 2>&1; }
if built; then
    echo "$CACHE/genmc"
    exit 0
fi

# --- find the archive -----------------------------------------------------------------------
repo_root=$(cd "$(dirname "$0")/.." && pwd)
find_archive() {
    if [ -n "${RINGCAST_SHARED:-}" ] && [ -f "$RINGCAST_SHARED/tools/$ARCHIVE_NAME" ]; then
        echo "$RINGCAST_SHARED/tools/$ARCHIVE_NAME"; return 0
    fi
    # The main checkout of a git worktree (its common dir's parent) comes as a second start.
    starts=$repo_root
    common=$(git -C "$repo_root" rev-parse --path-format=absolute --git-common-dir 2>/dev/null || true)
    [ -n "$common" ] && starts="$starts $(dirname "$common")"
    for start in $starts; do
        d=$start
        while :; do
            if [ -f "$d/shared/tools/$ARCHIVE_NAME" ]; then
                echo "$d/shared/tools/$ARCHIVE_NAME"; return 0
            fi
            [ "$d" = / ] && break
            d=$(dirname "$d")
        done
    done
    return 1
}
if ! ARCHIVE=$(find_archive); then
    log "cannot find $ARCHIVE_NAME: looked in \$RINGCAST_SHARED/tools and in shared/tools next to"
    log "$repo_root and every folder above it; set RINGCAST_SHARED to the folder holding tools/"
    exit 2
fi

# --- Debian packages ------------------------------------------------------------------------
PACKAGES="llvm-15-dev clang-15 libffi-dev zlib1g-dev libedit-dev autoconf automake make g++"
missing=""
for p in $PACKAGES; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" || missing="$missing $p"
done
if [ -n "$missing" ]; then
    SUDO=""
    [ "$(id -u)" -ne 0 ] && SUDO=sudo
    log "installing:$missing"
    export DEBIAN_FRONTEND=noninteractive
    # shellcheck disable=SC2086
    if ! $SUDO apt-get install -y -qq $missing >/dev/null 2>&1; then
        log "a package was not found: apt-get update, then install again"
        $SUDO apt-get update -qq >/dev/null
        # shellcheck disable=SC2086
        $SUDO apt-get install -y -qq $missing >/dev/null
    fi
fi

# --- build (serialised; in place, marked complete at the end) -------------------------------
mkdir -p "$CACHE_ROOT"
exec 9>"$CACHE_ROOT/genmc-$VERSION.lock"
if command -v flock >/dev/null 2>&1; then
    flock 9
fi
if built; then
    echo "$CACHE/genmc"   # another run built it while this one waited for the lock
    exit 0
fi
# Interpret LLVM's freeze (see the top). Idempotent: applies to a tree that lacks it.
patch_freeze() {
    h=$1/src/Runtime/Interpreter.h
    c=$1/src/Runtime/Execution.cpp
    grep -q visitFreezeInst "$h" && return 0
    sed -i 's|^\(\s*\)void visitFenceInst(FenceInst &I);|&\n\1void visitFreezeInst(FreezeInst \&I);|' "$h"
    grep -q visitFreezeInst "$h" || { log "patch_freeze: Interpreter.h not as expected"; exit 1; }
    cat >>"$c" <<'PATCH'

/* ringcast tools/build_genmc.sh: freeze is the identity (no poison values here) */
void Interpreter::visitFreezeInst(FreezeInst &I)
{
	ExecutionContext &SF = ECStack().back();
	updateDataDeps(getCurThr().id, &I, I.getOperand(0));
	SetValue(&I, getOperandValue(I.getOperand(0), SF), SF);
}
PATCH
}

# Atomic add/sub wrap at the access's width (see the top). Idempotent.
patch_rmw_wrap() {
    c=$1/src/Runtime/Execution.cpp
    grep -q "ringcast: wrap" "$c" && return 0
    sed -i 's|^\(\s*\)return (oldVal + val);|\1return rc_wrap(oldVal + val, size); /* ringcast: wrap */|; s|^\(\s*\)return (oldVal - val);|\1return rc_wrap(oldVal - val, size); /* ringcast: wrap */|' "$c"
    sed -i 's|^SVal Interpreter::executeAtomicRMWOperation(|static SVal rc_wrap(SVal v, ASize size) /* ringcast: wrap */\n{\n\tauto b = size.getBits();\n\treturn b >= 64 ? v : SVal(v.get() \& ((1ULL << b) - 1));\n}\n\n&|' "$c"
    [ "$(grep -c "ringcast: wrap" "$c")" = 3 ] || { log "patch_rmw_wrap: Execution.cpp not as expected"; exit 1; }
}

if [ -f "$CACHE/.complete" ] && [ -x "$CACHE/genmc" ]; then
    # an earlier build without the current patches: patch it and let make rebuild what changed
    log "updating the build in $CACHE to: $STAMP"
    start=$(date +%s)
    patch_freeze "$CACHE"
    patch_rmw_wrap "$CACHE"
    (cd "$CACHE" && make -j"$JOBS" >>build.log 2>&1) || { log "rebuild failed: see $CACHE/build.log"; exit 1; }
    echo "$STAMP" >"$CACHE/.complete"
    log "rebuilt in $(( $(date +%s) - start )) s"
    echo "$CACHE/genmc"
    exit 0
fi
rm -rf "$CACHE"
SCRATCH=$(mktemp -d "$CACHE_ROOT/genmc-$VERSION.unpack.XXXXXX")
trap 'rm -rf "$SCRATCH"' EXIT
start=$(date +%s)
log "building from $ARCHIVE in $CACHE (make -j$JOBS; 5-20+ min)"
tar xzf "$ARCHIVE" -C "$SCRATCH"
top=$(find "$SCRATCH" -mindepth 1 -maxdepth 1 -type d | head -n 1)
mv "$top" "$CACHE"
patch_freeze "$CACHE"
patch_rmw_wrap "$CACHE"
(
    cd "$CACHE"
    autoreconf --install >build.log 2>&1
    ./configure --with-llvm=$LLVM AR=llvm-ar-15 CC=gcc CXX=g++ >>build.log 2>&1
    make -j"$JOBS" >>build.log 2>&1
) || { log "build failed; last lines of $CACHE/build.log:"; tail -n 40 "$CACHE/build.log" >&2; exit 1; }
"$CACHE/genmc" --version >/dev/null 2>&1 || { log "built binary does not run"; exit 1; }
echo "$STAMP" >"$CACHE/.complete"
log "built in $(( $(date +%s) - start )) s"
echo "$CACHE/genmc"
