"""Property-based fuzzing of a real two-silo cluster's gateway and silo ports.

Hypothesis generates frames — random bytes, lying length prefixes, truncated frames, deep
nesting of every ext type the codec knows, valid-looking frames of every kind of
``messaging/frames.py`` (``FIELDS``, checked against ``KINDS``) with wrong fields and
bodies — and throws each at a port on a fresh connection, before and after a valid
handshake, while a well-behaved client keeps calling grains spread over both silos (so the
silo port carries real traffic too). Every test then asserts that both silo processes live,
that their memory grew by less than ``RSS_BOUND`` over the run, and that the well-behaved
client has seen no failure.

``ORLEANSPY_FUZZ_EXAMPLES`` (default 600 per test, five tests) sets how many examples each
test runs; raise it for a longer hunt, e.g. ``ORLEANSPY_FUZZ_EXAMPLES=20000 pytest tests/fuzz``.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgpack
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from integration.silo_process import REPO_ROOT, child_env, free_port

from orleanspy.messaging.client_identity import client_handshake
from orleanspy.messaging.frames import (
    CANCEL,
    CONTROL,
    CONTROL_ONE_WAY,
    DRAINED,
    GOAWAY,
    KINDS,
    ONE_WAY,
    PROTOCOL_VERSION,
    REQUEST,
    RESPONSE,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

EXAMPLES = int(os.environ.get("ORLEANSPY_FUZZ_EXAMPLES", "600"))
CLUSTER = "fuzzed"
SECRET = "fuzz-secret"
RSS_BOUND = 64 * 1024 * 1024
READ_BOUND = 2.0  # seconds a single exchange may take
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=False,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                       HealthCheck.function_scoped_fixture])


# -- the cluster under test -------------------------------------------------------------------
class Silo:
    def __init__(self, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.proc = proc
        self.log = log
        self.gateway = ("", 0)
        self.silo_port = ("", 0)

    def wait_ready(self) -> None:
        assert self.proc.stdout is not None
        for raw in self.proc.stdout:
            line = raw.decode().strip()
            if line.startswith("orleanspy silo cluster silo="):
                endpoint = line.split("=", 1)[1].partition("@")[0]
                host, _, port = endpoint.rpartition(":")
                self.silo_port = (host, int(port))
            if line.startswith("orleanspy silo ready gateway="):
                host, _, port = line.split("=", 1)[1].rpartition(":")
                self.gateway = (host, int(port))
                return
        raise AssertionError(f"silo exited before it was ready:\n{self.log.read_text()}")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def rss(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
        raise AssertionError("no VmRSS")


_STEADY = """
import asyncio, json, sys, threading
from orleanspy import ClusterClient

stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()

async def main():
    calls, failures = 0, []
    async with ClusterClient(gateways=[sys.argv[1]], cluster_id=sys.argv[2],
                             secret=sys.argv[3], response_timeout=10.0) as client:
        i = 0
        while not stop.is_set():
            try:
                await client.get_grain("SpreadSpot", f"steady-{i % 32}").hit()
                calls += 1
            except Exception as exc:
                failures.append(repr(exc))
            i += 1
            await asyncio.sleep(0.002)
    print(json.dumps({"calls": calls, "failures": failures}))

asyncio.run(main())
"""


class Steady:
    """A well-behaved ClusterClient calling grains on both silos, in its own process (so it
    shares nothing with the fuzzer)."""

    def __init__(self, gateway: tuple[str, int]) -> None:
        self.proc = subprocess.Popen(
            [sys.executable, "-c", _STEADY, f"{gateway[0]}:{gateway[1]}", CLUSTER, SECRET],
            cwd=REPO_ROOT, env=child_env(), stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )

    def stop(self) -> dict[str, Any]:
        """Stop calling; the counts of calls and failures."""
        out, err = self.proc.communicate(b"", timeout=30)
        assert self.proc.returncode == 0, err.decode()[-4000:]
        result: dict[str, Any] = json.loads(out.decode().strip().splitlines()[-1])
        return result


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[Silo]]:
    root = tmp_path_factory.mktemp("fuzz")
    silos: list[Silo] = []
    try:
        for i in range(2):
            log = root / f"silo-{i}.log"
            with log.open("wb") as err:
                proc = subprocess.Popen(
                    [sys.executable, "-m", "silo", "silo", "start",
                     "--app", "tests.integration.cluster_app", "--cluster-id", CLUSTER,
                     "--membership", f"sqlite:{root / 'membership.db'}", "--data-dir", str(root),
                     "--storage", "memory", "--reminders", "memory", "--secret", SECRET,
                     "--gateway-port", str(free_port()), "--port", str(free_port()),
                     "--log-format", "json", "--log-level", "error",
                     "--shutdown-timeout", "5", "--probe-period", "1"],
                    cwd=REPO_ROOT, env=child_env(), stdout=subprocess.PIPE, stderr=err,
                )
            silo = Silo(proc, log)
            silos.append(silo)
            silo.wait_ready()
        yield silos
    finally:
        for silo in silos:
            if silo.alive:
                silo.proc.terminate()
        for silo in silos:
            with contextlib.suppress(subprocess.TimeoutExpired):
                silo.proc.wait(timeout=15)
            if silo.alive:
                silo.proc.kill()
                silo.proc.wait()
            if silo.proc.stdout is not None:
                silo.proc.stdout.close()


@pytest.fixture
def steady(cluster: list[Silo]) -> Iterator[Steady]:
    """The well-behaved client; after the test: both silos alive, memory bounded, and not a
    single failed call."""
    baseline = [silo.rss() for silo in cluster]
    client = Steady(cluster[0].gateway)
    yield client
    result = client.stop()
    for silo, before in zip(cluster, baseline, strict=True):
        assert silo.alive, silo.log.read_text()[-4000:]
        grown = silo.rss() - before
        assert grown < RSS_BOUND, f"silo grew by {grown / 2**20:.1f} MiB"
    assert result["failures"] == []
    assert result["calls"] > 0


# -- one exchange ----------------------------------------------------------------------------
def exchange(address: tuple[str, int], data: bytes, *, chunks: int = 1) -> None:
    """Send ``data`` (in ``chunks`` writes) on a fresh connection, end our side, and read
    whatever the silo answers until it closes (bounded)."""
    with socket.create_connection(address, timeout=READ_BOUND) as sock:
        step = max(1, len(data) // chunks)
        try:
            for start in range(0, len(data), step):
                sock.sendall(data[start : start + step])
            sock.shutdown(socket.SHUT_WR)
            while sock.recv(65536):
                pass
        except OSError:
            pass  # reset, not connected any more, or slow to close: the silo decides


def frame(payload: bytes, length: int | None = None) -> bytes:
    return (len(payload) if length is None else length).to_bytes(4, "big") + payload


def client_hello() -> bytes:
    return frame(msgpack.packb(client_handshake(CLUSTER, SECRET)))


def tool_hello() -> bytes:
    return frame(msgpack.packb({"v": PROTOCOL_VERSION, "cluster": CLUSTER, "secret": SECRET,
                                "silo": None, "to": None}))


# -- strategies --------------------------------------------------------------------------------
scalars = st.one_of(
    st.none(), st.booleans(), st.integers(-(2**63), 2**64 - 1), st.floats(),
    st.text(max_size=40), st.binary(max_size=40),
)


def _ext(children: st.SearchStrategy[Any]) -> st.SearchStrategy[msgpack.ExtType]:
    inner = st.one_of(
        children.map(lambda v: msgpack.packb(v, use_bin_type=True)), st.binary(max_size=60)
    )
    return st.builds(msgpack.ExtType, st.integers(0, 127), inner)


values = st.recursive(
    scalars,
    lambda children: st.one_of(
        st.lists(children, max_size=6),
        st.dictionaries(st.one_of(st.text(max_size=10), st.integers(-(2**63), 2**63)), children,
                        max_size=6),
        _ext(children),
    ),
    max_leaves=40,
)


@st.composite
def deep_nesting(draw: st.DrawFn) -> bytes:
    """Ext values (any code) or arrays nested far past every limit, under a few KiB."""
    levels = draw(st.integers(30, 400))
    code = draw(st.integers(1, 20))
    use_ext = draw(st.booleans())
    data = msgpack.packb([1])
    for _ in range(levels):
        data = msgpack.packb(msgpack.ExtType(code, data) if use_ext else [msgpack.ExtType(
            code, data)])
    return data


def _or_junk(strategy: st.SearchStrategy[Any]) -> st.SearchStrategy[Any]:
    """Mostly the right type, sometimes any value."""
    return st.one_of(strategy, strategy, values)


_type_names = _or_junk(st.sampled_from([
    "SpreadSpot", "Spot", "Relay", "orleanspy.PubSubRendezvous", "orleanspy.PullingAgent",
    "orleanspy.StreamPublisher", "orleanspy.ClientStreamConsumer", ""]))
_methods = _or_junk(st.sampled_from([
    "hit", "info", "explode", "__orleanspy_stream_deliver__", "receive_reminder", "status",
    "dir", "gossip", "probe"]))
_ids = st.one_of(st.integers(0, 2**64 - 1), values)
_bodies = st.one_of(
    st.tuples(st.lists(values, max_size=4), st.none() | st.dictionaries(
        st.text(max_size=6), values, max_size=3)).map(lambda v: msgpack.packb(list(v))),
    deep_nesting(), st.binary(max_size=64), values,
)

#: The fields after the kind of every frame kind (``orleanspy.messaging.frames.KINDS``).
FIELDS: dict[int, list[st.SearchStrategy[Any]]] = {
    REQUEST: [_ids, _type_names, _or_junk(st.sampled_from(["k", "steady-1"])), _methods,
              _or_junk(st.none() | st.floats(0, 30)),
              _or_junk(st.lists(st.lists(values, max_size=3), max_size=3)),
              _or_junk(st.integers(0, 5)), _or_junk(st.booleans()), _bodies,
              _or_junk(st.none() | st.dictionaries(st.text(max_size=8), values, max_size=3))],
    RESPONSE: [_ids, _or_junk(st.booleans()), _bodies],
    CONTROL: [_ids, _methods, _or_junk(st.lists(values, max_size=4))],
    DRAINED: [],
    GOAWAY: [],
    CANCEL: [_ids],
}
FIELDS[ONE_WAY] = FIELDS[REQUEST]
FIELDS[CONTROL_ONE_WAY] = FIELDS[CONTROL]


def test_the_fuzzer_knows_every_frame_kind() -> None:
    """A kind added to the protocol is fuzzed too (its fields listed in ``FIELDS``)."""
    assert set(FIELDS) == set(KINDS)
    # Request and Control carry their kind as their first field (one_way, answer).
    for kind, record in KINDS.items():
        fields = record._fields if record is not None else ()
        after_kind = len(fields) - (fields[:1] in (("one_way",), ("answer",)))
        assert len(FIELDS[kind]) == after_kind, (kind, fields)


@st.composite
def message_frames(draw: st.DrawFn) -> list[Any]:
    """A frame of each kind (and of no kind), with fields of the right and wrong types, and
    sometimes a field too few or too many."""
    kind = draw(st.sampled_from([*sorted(FIELDS), -1, 7]))
    fields: list[Any] = [kind] + [draw(f) for f in FIELDS.get(kind, [])]
    change = draw(st.sampled_from([None, None, None, "cut", "extra"]))
    if change == "cut" and len(fields) > 1:
        fields = fields[: draw(st.integers(1, len(fields) - 1))]
    elif change == "extra":
        fields.append(draw(values))
    return fields


def payloads() -> st.SearchStrategy[bytes]:
    return st.one_of(
        st.binary(max_size=2048),
        values.map(lambda v: msgpack.packb(v, use_bin_type=True)),
        message_frames().map(lambda v: msgpack.packb(v, use_bin_type=True)),
        deep_nesting(),
    )


@st.composite
def streams_of_frames(draw: st.DrawFn) -> tuple[bytes, int]:
    """Several frames back to back, some with lying length prefixes or cut short."""
    out = b""
    for _ in range(draw(st.integers(1, 4))):
        payload = draw(payloads())
        lie = draw(st.sampled_from([None, None, None, "long", "short", "huge"]))
        length = {None: None, "long": len(payload) + 100, "short": max(0, len(payload) - 1),
                  "huge": draw(st.integers(2**20, 2**32 - 1))}[lie]
        out += frame(payload, length)
    if draw(st.booleans()):
        out = out[: draw(st.integers(0, len(out)))]
    return out, draw(st.integers(1, 5))


# -- the tests ---------------------------------------------------------------------------------
@FUZZ
@given(data=streams_of_frames())
def test_fuzz_gateway_before_the_handshake(cluster: list[Silo], steady: Steady,
                                           data: tuple[bytes, int]) -> None:
    exchange(cluster[0].gateway, data[0], chunks=data[1])


@FUZZ
@given(data=streams_of_frames())
def test_fuzz_gateway_after_the_handshake(cluster: list[Silo], steady: Steady,
                                          data: tuple[bytes, int]) -> None:
    exchange(cluster[0].gateway, client_hello() + data[0], chunks=data[1])


@FUZZ
@given(data=streams_of_frames())
def test_fuzz_silo_port_before_the_handshake(cluster: list[Silo], steady: Steady,
                                             data: tuple[bytes, int]) -> None:
    exchange(cluster[0].silo_port, data[0], chunks=data[1])


@FUZZ
@given(data=streams_of_frames())
def test_fuzz_silo_port_after_a_tool_handshake(cluster: list[Silo], steady: Steady,
                                               data: tuple[bytes, int]) -> None:
    exchange(cluster[0].silo_port, tool_hello() + data[0], chunks=data[1])


@FUZZ
@given(hello=st.dictionaries(
    st.sampled_from(["v", "cluster", "secret", "silo", "to", "nonce", "client", "proof",
                     "challenge", "ok"]),
    values | st.sampled_from([1, CLUSTER, SECRET, None]) | st.binary(min_size=32, max_size=32),
    max_size=8,
), then=streams_of_frames())
def test_fuzz_silo_port_handshakes(cluster: list[Silo], steady: Steady, hello: dict[str, Any],
                                   then: tuple[bytes, int]) -> None:
    exchange(cluster[0].silo_port, frame(msgpack.packb(hello, use_bin_type=True)) + then[0],
             chunks=then[1])
