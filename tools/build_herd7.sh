#!/usr/bin/env bash
# Build herd7 (herdtools7 7.57) from the shared source archive into a cache outside the clone,
# once: a second run finds the built binary and only prints its path.
#
#   bash tools/build_herd7.sh          # prints the herd7 path on its last line
#
# The archive is looked for in $RINGCAST_TOOLS_DIR, then in shared/tools next to the clone or
# one or two folders above it (../shared/tools from the main checkout, ../../shared/tools from a
# worktree). The cache is $RINGCAST_TOOLS_CACHE (default ~/.cache/ringcast-tools).
# Build instructions: shared/tools/README.md. tests/proofs/test_herd.py finds the result in the cache.
set -euo pipefail

VERSION=7.57
NAME="herdtools7-$VERSION"
CACHE="${RINGCAST_TOOLS_CACHE:-$HOME/.cache/ringcast-tools}"
DEST="$CACHE/$NAME"
HERD="$DEST/bin/herd7"

LIBDIR="$DEST/share/herdtools7/herd"   # the models (aarch64.cat, x86tso.cat); herd7 -I "$LIBDIR"
if [ -x "$HERD" ] && [ -f "$LIBDIR/aarch64.cat" ] && [ -f "$LIBDIR/x86tso.cat" ]; then
    echo "$HERD"
    exit 0
fi

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
archive=""
for dir in ${RINGCAST_TOOLS_DIR:+"$RINGCAST_TOOLS_DIR"} "$repo/shared/tools" \
           "$repo/../shared/tools" "$repo/../../shared/tools"; do
    if [ -f "$dir/$NAME.tar.gz" ]; then archive="$(cd "$dir" && pwd)/$NAME.tar.gz"; break; fi
done
if [ -z "$archive" ]; then
    echo "build_herd7.sh: $NAME.tar.gz not found in \$RINGCAST_TOOLS_DIR or shared/tools" \
         "beside/above $repo; set RINGCAST_TOOLS_DIR to the folder that holds it" >&2
    exit 1
fi

if ! command -v dune >/dev/null || ! command -v menhir >/dev/null \
   || ! command -v ocamlfind >/dev/null || ! ocamlfind query zarith >/dev/null 2>&1; then
    SUDO=""; [ "$(id -u)" = 0 ] || SUDO="sudo"
    export DEBIAN_FRONTEND=noninteractive
    $SUDO apt-get update -qq >/dev/null
    $SUDO apt-get install -y -qq ocaml ocaml-dune menhir libmenhir-ocaml-dev \
        libzarith-ocaml-dev ocaml-findlib >/dev/null
fi

work="$(mktemp -d "${TMPDIR:-/tmp}/build_herd7.XXXXXX")"
trap 'rm -rf "$work"' EXIT
tar xzf "$archive" -C "$work"
(
    cd "$work/$NAME"
    sh ./version-gen.sh "$DEST" >/dev/null
    dune build --profile release herd/herd.exe 2>&1 | tail -n 20
)
rm -rf "$DEST.tmp" && mkdir -p "$DEST.tmp/bin" "$DEST.tmp/share/herdtools7"
cp "$work/$NAME/_build/default/herd/herd.exe" "$DEST.tmp/bin/herd7"
cp -r "$work/$NAME/herd/libdir" "$DEST.tmp/share/herdtools7/herd"
rm -rf "$DEST" && mv "$DEST.tmp" "$DEST"
echo "$HERD"
