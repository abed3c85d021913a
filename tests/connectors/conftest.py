"""The vendor stand-ins listen on loopback over plain http: these tests run under the policy ``lakesync local``
uses (:data:`lakesync.core.network.LOCAL_DEVELOPMENT`), restored afterwards; the default stays strict."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from lakesync import egress
from lakesync.core.network import LOCAL_DEVELOPMENT


@pytest.fixture(autouse=True)
def local_network_policy() -> Iterator[None]:
    previous = egress.configure(LOCAL_DEVELOPMENT)
    yield
    egress.configure(previous)
