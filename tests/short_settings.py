"""Engine settings for tests that run on the real clock: 5 s visibility chunks renewed 2.5 s ahead,
looked at every half second; a 1 s receiver timeout, so reconciliation may act on leases after 2 s."""

from __future__ import annotations

from typing import Any

SHORT_THRESHOLD: dict[str, Any] = {
    "policy": "threshold",
    "visibility_timeout_s": 5,
    "threshold_s": 2.5,
    "heartbeat_s": 0.5,
    "extender_period_s": 1,
    "release_delay_base_s": 0,
    "max_attempts": 3,
    "receiver_timeout_s": 1,
    "reconcile_grace_s": 2,
}

SPARK_THRESHOLD: dict[str, Any] = {
    **SHORT_THRESHOLD,
    "visibility_timeout_s": 12,
    "threshold_s": 8,
    "receiver_timeout_s": 10,
    "reconcile_grace_s": 15,
}
"""For jobs on the local Spark worker, whose JVM shares two cores with the extender: renewals start 8 s
before a 12 s visibility runs out (rather than 2.5 s before 5 s), so a late extender run on a loaded
machine still renews in time; and reconciliation takes a lease's execution for never started only 15 s
after the receive: a receiver's StartExecution beside a starting JVM may take seconds, and a start that
lands after the grace has its message released and received again, which these tests count."""

UNHURRIED_THRESHOLD: dict[str, Any] = {
    **SHORT_THRESHOLD,
    "visibility_timeout_s": 12,
    "threshold_s": 11,
    "receiver_timeout_s": 10,
    "reconcile_grace_s": 15,
}
"""For runs of the offline runtime that count a short job's renewals and expect no fault at all. Renewals
fall due 1 s after each receive or renewal and 11 s before a 12 s visibility runs out, so a job of a few
seconds is renewed even when the extender's runs come seconds late, and its message lapses only if they
come 11 s late. The receiver's timeout is 10 s (at most the queue's VT, as Lambda requires): the offline
runtime ends an invocation past it as Lambda does, recorded as a `function_timeout`, and a receiver
invocation of two records took up to 1.4 s on a busy machine (against SHORT_THRESHOLD's 1 s)."""
