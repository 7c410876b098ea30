"""Errors shared across the engine's packages."""

from __future__ import annotations


class SettingsError(ValueError):
    """A setting is out of range, or the combination could let a message lapse."""
