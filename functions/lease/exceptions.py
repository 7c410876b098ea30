"""Errors of the lease store."""

from __future__ import annotations


class LeaseError(Exception):
    """Base class of lease store errors."""


class LeaseNotFoundError(LeaseError):
    """No lease exists for the message id."""
