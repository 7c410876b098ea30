"""The stack's side of lowering `shards` (docs/deploy.md, "Upgrading: the shard count"): the setting and
`previous_shards` reach the functions, and the extender is updated after the functions that write leases."""

from __future__ import annotations

from longjobs.construct.config import load_config
from tests.infra.conftest import Synth


def test_shards_and_previous_shards_chosen_in_context_reach_the_functions_environment() -> None:
    env = load_config({"shards": "4", "previous_shards": "16"}).engine_environment()
    assert env["SHARDS"] == "4" and env["PREVIOUS_SHARDS"] == "16"
    defaults = load_config({}).engine_environment()
    assert "SHARDS" not in defaults and "PREVIOUS_SHARDS" not in defaults, "the engine's defaults: 1, watching 8"


def test_extender_is_updated_after_the_receiver_and_the_watcher(dev: Synth) -> None:
    """When the extender's new code first runs, no invocation of the lease writers' old code begins any
    more: a lease on an old shard comes only from one already running (`longjobs.engine.lease.legacy`)."""
    functions = dev.part("Functions")
    depends_on = set(dev.resource(functions.extender).get("DependsOn", []))
    assert {dev.logical_id(functions.receiver), dev.logical_id(functions.watcher)} <= depends_on
