"""Test configuration shared by every test module.

Hypothesis runs under a deterministic profile by default (derandomized, no deadline), so a
failure on CI is reproducible on any machine. ``HYPOTHESIS_PROFILE=explore`` searches more.
"""
import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    derandomize=True,
    deadline=None,
    max_examples=25,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("explore", deadline=None, max_examples=300)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "ci"))

