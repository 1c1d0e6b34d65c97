"""Backoff, TaskSet and the back-end URL parser."""

from __future__ import annotations

import asyncio
import os
import random

import pytest

from orleanspy._util.backoff import Backoff
from orleanspy._util.tasks import TaskSet
from orleanspy._util.urls import parse_backend_url
from orleanspy.errors import ConfigurationError


def test_backoff_grows_exponentially_to_its_cap_within_the_jitter():
    b = Backoff(initial=0.1, maximum=2.0, jitter=0.2)
    rng = random.Random(7)
    assert [b.base(n) for n in (1, 2, 3, 6)] == [0.1, 0.2, 0.4, 2.0]
    for attempt in range(1, 30):
        d = b.delay(attempt, rng)
        assert b.base(attempt) * 0.8 <= d <= min(2.0, b.base(attempt) * 1.2)
    assert Backoff(jitter=0).delay(3) == Backoff(jitter=0).base(3)


def test_backoff_rejects_settings_that_cannot_work():
    with pytest.raises(ValueError, match="initial"):
        Backoff(initial=3, maximum=1)
    with pytest.raises(ValueError, match="jitter"):
        Backoff(jitter=1.5)


async def test_taskset_close_cancels_and_awaits_its_tasks_and_refuses_new_ones():
    tasks = TaskSet()
    cancelled = asyncio.Event()

    async def forever() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            cancelled.set()

    task = tasks.spawn(forever())
    await asyncio.sleep(0)
    assert len(tasks) == 1
    await tasks.close()
    assert task.cancelled() and cancelled.is_set()
    assert len(tasks) == 0
    coro = forever()
    with pytest.raises(RuntimeError, match="after close"):
        tasks.spawn(coro)


async def test_taskset_reports_a_failed_task_to_its_owner():
    failures: list[BaseException] = []
    tasks = TaskSet(on_error=lambda task, exc: failures.append(exc))

    async def fail() -> None:
        raise ValueError("bad")

    t = tasks.spawn(fail())
    await asyncio.gather(t, return_exceptions=True)
    assert [repr(e) for e in failures] == [repr(ValueError("bad"))]


@pytest.mark.parametrize(
    ("url", "scheme", "path"),
    [
        ("memory", "memory", ""),
        ("sqlite:state.db", "sqlite", os.path.join("/data", "state.db")),
        ("sqlite://state.db", "sqlite", os.path.join("/data", "state.db")),
        ("sqlite:///abs/state.db", "sqlite", "/abs/state.db"),
        ("sqlite:/abs/state.db", "sqlite", "/abs/state.db"),
        ("redis://127.0.0.1:6379/0", "redis", ""),
        ("generator", "word", ""),
    ],
)
def test_parse_backend_url_accepts_each_form(url: str, scheme: str, path: str):
    parsed = parse_backend_url(
        url, key="streams.x.adapter", data_dir="/data", words=frozenset({"generator"})
    )
    assert (parsed.scheme, parsed.path) == (scheme, path)


@pytest.mark.parametrize("url", ["sqlite:", "postgres://x", "", "mem"])
def test_parse_backend_url_error_names_the_key_value_and_fix(url: str):
    with pytest.raises(ConfigurationError) as info:
        parse_backend_url(url, key="SiloOptions.storage", allow=frozenset({"memory", "sqlite"}))
    text = str(info.value)
    assert "SiloOptions.storage" in text and repr(url) in text and "sqlite:PATH" in text
    assert "redis" not in text
