"""`python -m offline` in this repository: a front for `longjobs.offline` (not shipped in the wheel)."""
