"""Test configuration shared by every test module.

Hypothesis runs under a deterministic profile by default (derandomized, no deadline), so a
failure on CI is reproducible on any machine. ``HYPOTHESIS_PROFILE=explore`` searches more.

Every test runs with one torch thread: ``make test`` runs two pytest workers on two cores, and
torch's intra-op threads contending for the same cores make small-matrix code 10-100x slower.
"""
import os

import pytest
import torch
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



@pytest.fixture(autouse=True)
def single_torch_thread():
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(previous)
