"""Tests that start other processes: the Makefile's tool checks, each interpreter the code must run on,
what a fresh interpreter imports and prints, containers forked as SnapStart restores them. Unit tests
may not start programs (tests/unit/conftest.py)."""
