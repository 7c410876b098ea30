"""The benchmarks' tests are pure, as unit tests are: no network."""

from tests.unit.conftest import _no_network

__all__ = ["_no_network"]
