"""Issue 35, point 4: a queue starts when every temp dir is full or unwritable, so that
``tempfile.gettempdir()`` itself raises (before, ``channel._ipc_bases`` called it unguarded and
the queue failed with ``FileNotFoundError: No usable temporary directory``, ~/.cache/ringcast
never tried). Run in a new process: gettempdir() caches its answer per process."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

_CHILD = r"""
import errno, os, sys, tempfile, threading

def no_temp_dir():
    raise FileNotFoundError(errno.ENOENT, "No usable temporary directory found in ['/tmp', '/var/tmp', '/usr/tmp']")

tempfile.gettempdir = no_temp_dir
from ringcast import MessageQueue, channel
channel.RUN_USER = sys.argv[1]  # no /run/user/UID either
w = MessageQueue(1, 1)
h = w.export_handle()
r = MessageQueue.create_from_handle(h, 0)
t = threading.Thread(target=r.wait_until_ready, args=(20,))
t.start()
w.wait_until_ready(20)
t.join(20)
w.enqueue("queued", timeout=10)
print(h.local_subscribe_addr, r.dequeue(timeout=10), flush=True)
r.close()
w.close()
"""


@pytest.mark.timeout(60)
def test_a_new_process_creates_a_queue_when_gettempdir_fails(tmp_path):
    home = tempfile.mkdtemp(prefix="rh-")  # short: the socket path must fit 107 bytes
    env = {k: v for k, v in os.environ.items() if k not in ("XDG_RUNTIME_DIR", "TMPDIR")}
    env["HOME"] = home
    try:
        out = subprocess.run([sys.executable, "-c", _CHILD, str(tmp_path / "no-run-user")], env=env, capture_output=True,
                             text=True, timeout=45)
        assert out.returncode == 0, out.stderr
        addr, got = out.stdout.split()
        assert addr.startswith(f"ipc://{home}/.cache/ringcast/") and got == "queued"
        assert os.listdir(os.path.join(home, ".cache", "ringcast")) == []  # the socket directory is gone
    finally:
        shutil.rmtree(home)
