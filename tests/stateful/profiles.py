"""The Hypothesis profiles, registered once: the test suite loads one (tests/conftest.py, default
``dev``), and so does the harness's command line (``python -m tests.stateful.guided``, default
``ci``); ``HYPOTHESIS_PROFILE`` names another."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile("ci", derandomize=True, deadline=None, max_examples=50, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("dev", deadline=None, max_examples=100)
settings.register_profile("stress", deadline=None, max_examples=2000)


def load_profile(default: str) -> None:
    """Load ``$HYPOTHESIS_PROFILE``, else ``default``."""
    settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", default))
