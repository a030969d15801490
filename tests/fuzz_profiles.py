"""Hypothesis profiles for the fuzz suite (``test_fuzz.py``).

* ``ci`` (the default): a fixed, bounded sample -- derandomized, so CI runs
  the same programs every time and a red run is reproducible; the whole fuzz
  module runs in well under a minute on 2 cores.
* ``long``: random seeds and about twenty times as many programs (about
  half an hour on 2 cores)
  (``HYPOTHESIS_PROFILE=long python -m pytest tests/test_fuzz.py``).

Deadlines are off: the first call of a transform traces, differentiates and
generates code, and the first kernel compile loads Numba.
"""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")

_COMMON = dict(
    deadline=None,
    database=None,  # nothing written into the work tree; failures print their program
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    print_blob=True,
)
settings.register_profile("ci", derandomize=True, **_COMMON)
settings.register_profile("long", **_COMMON)
if PROFILE not in ("ci", "long"):
    raise ValueError(f"HYPOTHESIS_PROFILE must be 'ci' or 'long'; got {PROFILE!r}")

#: examples per property, by profile
BUDGET = {
    "ci": {"first": 400, "second": 120, "float32": 150, "symbolic": 60, "kernel": 5, "special": 150},
    "long": {"first": 8000, "second": 3000, "float32": 4000, "symbolic": 1500, "kernel": 120, "special": 4000},
}


def fuzz_settings(prop: str) -> settings:
    """The settings for one property under the selected profile
    (``FUZZ_MAX_EXAMPLES=n`` overrides every property's count)."""
    n = int(os.environ.get("FUZZ_MAX_EXAMPLES", 0)) or BUDGET[PROFILE][prop]
    return settings(settings.get_profile(PROFILE), max_examples=n)
