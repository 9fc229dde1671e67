"""Thin pytest wrapper of run_gpu_checks.py (NCCL, CUDA tensors, CUDA graph capture)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

torch = pytest.importorskip("torch")

pytestmark = [
    pytest.mark.gpu,
    pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs >= 2 CUDA devices (NCCL broadcast between GPUs)"),
]


@pytest.mark.timeout(320)
def test_gpu_checks():
    script = os.path.join(os.path.dirname(__file__), "run_gpu_checks.py")
    proc = subprocess.run([sys.executable, script, "--timeout", "140"], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "FAIL" not in proc.stdout
