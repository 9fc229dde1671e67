"""Issue 35, point 5: the handle's secrets (its topic, the CURVE client secret key, and the PLAIN
password derived from the topic) appear neither in ``repr(Handle)`` nor in any log record, with
every logger at DEBUG, in every mode. Before: ``repr(Handle)`` showed the topic and the CURVE
keys, and pyzmq's ZAP handler logged ``password=<topic hex>`` (remote_insecure)."""

from __future__ import annotations

import logging

import pytest

from ringcast import remote

from _clients import joined_pair

MODES = {
    "local": dict(n_local_reader=1),
    "curve": dict(connect_ip="127.0.0.1"),
    "remote_insecure": dict(connect_ip="127.0.0.1", remote_insecure=True),
    "aes-gcm": dict(connect_ip="127.0.0.1", remote_security="aes-gcm"),
}


def _secrets(h) -> list[str]:
    """Every spelling of a secret of ``h`` that a repr or a log line could contain."""
    out = [repr(h.topic), h.topic.hex(), remote.plain_password(h.topic)]
    if h.remote_curve_keys is not None:
        secret_key = h.remote_curve_keys[2]
        out += [repr(secret_key), secret_key.decode()]
    return out


@pytest.mark.timeout(60)
@pytest.mark.parametrize("mode", list(MODES))
def test_no_secret_in_the_handles_repr_or_a_debug_log(mode, caplog):
    caplog.set_level(logging.DEBUG)  # the root logger: every logger, pyzmq's ZAP handler's included
    w, r = joined_pair(**MODES[mode])
    h = w.export_handle()
    key = w.remote_socket.sealer.key.hex() if mode == "aes-gcm" else None  # the message key: never logged either
    try:
        w.enqueue({"x": 1}, timeout=10)
        assert r.dequeue(timeout=10) == {"x": 1}
    finally:
        r.close()
        w.close()
    logged = "\n".join(f"{rec.name} {rec.getMessage()}" for rec in caplog.records)
    if mode in ("remote_insecure", "aes-gcm"):  # the ZAP handler did authenticate the reader, and logged it
        assert "ALLOWED (PLAIN)" in logged
    for text, where in ((repr(h), "repr(Handle)"), (str(h), "str(Handle)"), (logged, "the DEBUG log")):
        for secret in _secrets(h) + ([key] if key else []):
            assert secret not in text, f"{where} contains a secret: {secret!r}"
