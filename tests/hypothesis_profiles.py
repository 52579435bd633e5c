"""Hypothesis profiles for the property tests: reproducible by default, deeper on request.

``ci`` (the default) is derandomized, so a run explores the same examples every time and a
failure reproduces exactly; ``DSH_FORK_FUZZ=deep`` switches to a randomized, much longer search
for local fuzzing sessions. Import this module before using ``@given``.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    max_examples=60,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.register_profile(
    "deep",
    derandomize=False,
    max_examples=2000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
settings.load_profile("deep" if os.environ.get("DSH_FORK_FUZZ") == "deep" else "ci")
