"""Engine settings for tests that run on the real clock: 4 s visibility chunks renewed every half second."""

from __future__ import annotations

from typing import Any

SHORT_THRESHOLD: dict[str, Any] = {
    "policy": "threshold",
    "visibility_timeout_s": 4,
    "threshold_s": 2,
    "heartbeat_s": 0.5,
    "extender_period_s": 1,
    "release_delay_base_s": 0,
    "max_receive_count": 3,
    "reconcile_grace_s": 1,
}
