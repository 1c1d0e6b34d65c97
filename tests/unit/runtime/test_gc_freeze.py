"""A running silo keeps the cyclic collector off the objects it started with
(``gc_freeze``, default on); the last silo of the process to stop gives them back."""

from __future__ import annotations

import gc

import pytest

from orleanspy import ConfigurationError, Silo, SiloOptions
from silo.config import load_config

pytestmark = pytest.mark.gc_freeze


async def test_a_running_silo_freezes_what_it_started_with_and_the_last_stop_unfreezes() -> None:
    gc.unfreeze()
    first = Silo(SiloOptions(gateway_port=None, shutdown_timeout=2.0))
    second = Silo(SiloOptions(gateway_port=None, shutdown_timeout=2.0))
    await first.start()
    try:
        assert gc.get_freeze_count() > 1000  # the runtime's modules, classes, functions
        await second.start()
        await first.stop()
        assert gc.get_freeze_count() > 1000  # the second silo still runs
    finally:
        await first.stop()
        await second.stop()
    assert gc.get_freeze_count() == 0


async def test_gc_freeze_false_leaves_the_collector_alone() -> None:
    gc.unfreeze()
    silo = Silo(SiloOptions(gateway_port=None, gc_freeze=False))
    await silo.start()
    try:
        assert gc.get_freeze_count() == 0
    finally:
        await silo.stop()


def test_gc_freeze_from_the_environment_takes_true_or_false() -> None:
    off = load_config(None, environ={"ORLEANSPY_GC_FREEZE": "false"}).options
    on = load_config(None, environ={"ORLEANSPY_GC_FREEZE": "yes"}).options

    assert off.gc_freeze is False and on.gc_freeze is True


def test_a_boolean_setting_that_is_not_true_or_false_names_the_fix() -> None:
    with pytest.raises(ConfigurationError,
                       match="ORLEANSPY_GC_FREEZE = 'maybe' must be true or false"):
        load_config(None, environ={"ORLEANSPY_GC_FREEZE": "maybe"})
