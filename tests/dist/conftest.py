"""Fixtures of the multi-process tests: two hosts with their own addresses on one machine."""
from __future__ import annotations

import pytest

from dsgraph.cluster.netns import HostsUnavailable, emulated_hosts


@pytest.fixture
def two_hosts():
    """Two emulated hosts (namespace names, addresses); skipped where they cannot be made."""
    try:
        with emulated_hosts() as hosts:
            yield hosts
    except HostsUnavailable as exc:
        pytest.skip(str(exc))
