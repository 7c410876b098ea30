"""The benchmarks' tests touch no network, as unit tests do not; some start Python (the cold-start imports)."""

from tests.unit.conftest import _no_network

__all__ = ["_no_network"]
