"""A client reaches no method the runtime calls, on a real silo with streams (implicit and
explicit subscriptions), a Parquet sink, reminders and pub-sub: the closed (type, method)
pairs are enumerated from the silo's own registry, checked against the rule of
docs/security.md ("a grain method is callable by clients unless it is a runtime hook or a
stream handler"), and each is called through the gateway with forged arguments. The runtime's
own deliveries keep arriving."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from orleanspy import MessageRejectedError
from orleanspy.ids import GrainId

from .silo_process import SiloLauncher, poll_until

pytestmark = pytest.mark.integration

APP = "tests.integration.surface_app"
SECRET = "client-secret"
#: the runtime's classes clients reach: publishing, and a client's own stream subscriptions
CLIENT_ENDPOINTS = {"orleanspy.StreamPublisher", "orleanspy.ClientStreamConsumer",
                    "orleanspy.ClientObserverHub"}
#: the runtime methods of every grain a caller of a streamed response uses (with its token)
STREAMED_RESPONSE = {"__orleanspy_stream_pull__", "__orleanspy_stream_close__"}
STREAM_CALLBACKS = {"on_next", "on_next_batch", "on_error", "on_completed"}
#: methods the application marks ``@stream_handler`` or inherits as one (the sink's)
MARKED = {("Explicit", "on_reading"), ("Lake", "write_events"), ("Lake", "on_commit")}


def closed_by_rule(type_name: str, method: str) -> bool:
    """The rule, stated independently of the code that applies it."""
    if type_name.startswith("orleanspy.") and type_name not in CLIENT_ENDPOINTS:
        return True
    if method in STREAMED_RESPONSE:
        return False
    return (method.startswith("__orleanspy_") or method == "receive_reminder"
            or method in STREAM_CALLBACKS or (type_name, method) in MARKED)


def forged_args(method: str) -> tuple[Any, ...]:
    return {
        "on_next": (999999, None),
        "on_next_batch": ([[999999, None]],),
        "on_error": ("forged",),
        "on_reading": (999999, None),
        "write_events": ("lake", "k", [[{"n": 999999}, None]]),
        "on_commit": (["forged.parquet"], 999999),
        "__orleanspy_stream_deliver__": ("implicit:forged", "numbers", "k",
                                         [[999999, None]]),
    }.get(method, ())


def _read(path: Path) -> str:
    try:
        return path.read_text()
    except FileNotFoundError:
        return ""


async def test_every_method_the_runtime_calls_is_closed_to_a_client(
    silo_launcher: SiloLauncher, tmp_path: Path
) -> None:
    config = tmp_path / "streams.toml"
    config.write_text('[streams.s]\nadapter = "memory"\ntotal_queues = 2\npull_period = 0.02\n')
    silo = await silo_launcher.start("--config", str(config), secret=SECRET, app=APP)
    received = silo_launcher.data_dir / "received.txt"
    async with silo.client() as client:
        surface = client.get_grain("Surface", "s")
        await client.get_grain("Explicit", "x").watch("r")
        registered = {(t, m): ok for t, m, ok in await surface.methods()}
        closed = {pair for pair, ok in registered.items() if not ok}
        # the silo closes exactly what the rule closes: each stream handler, each hook
        assert closed == {pair for pair in registered if closed_by_rule(*pair)}
        for pair in [("NumberSink", "on_next"), ("NumberSink", "on_error"),
                     ("NumberSink", "on_completed"), ("Explicit", "on_reading"),
                     ("Lake", "write_events"), ("Lake", "on_commit"), ("Lake", "on_next"),
                     ("Ticker", "receive_reminder"),
                     ("orleanspy.PubSubRendezvous", "register_producer")]:
            assert pair in closed, pair
        assert not {("NumberSink", "total"), ("Explicit", "watch"),
                    ("Lake", "sink_statistics")} & closed

        live: dict[str, list[Any]] = {}
        for type_name, key in await surface.live():
            live.setdefault(type_name, []).append(key)
        attempts = 0
        for type_name, method in sorted(closed):
            keys = live.get(type_name) or ["k"]
            for key in keys:
                gid = GrainId(type_name, tuple(key) if isinstance(key, list) else key)
                with pytest.raises(MessageRejectedError, match="not callable from a client") as e:
                    await client.call(gid, method, forged_args(method), None, 5.0)
                assert e.value.kind == "not_callable", (type_name, method)
                attempts += 1

        # the runtime still delivers to each kind of handler
        provider = client.get_stream_provider("s")
        await provider.get_stream("numbers", "k").on_next(7)
        await provider.get_stream("readings", "r").on_next(8)
        await poll_until(lambda: _aread(received),
                         lambda text: "implicit k 7\n" in text and "explicit x 8\n" in text,
                         timeout=10)
        assert "999999" not in _read(received)
        assert await client.get_grain("NumberSink", "k").total() == 0
    assert silo.alive
    assert attempts >= len(closed)
    assert '"event": "client_call_refused"' in silo.log_text()  # logged at a bounded rate


async def _aread(path: Path) -> str:
    return _read(path)
