"""What an authenticated client can cost a real silo: a frame decodes within a stated multiple
of its size, and error replies do not show where the silo's files lie (a flood of calls:
``test_request_caps.py``).

Bounds stated by these tests (docs/security.md):

* ``RSS_RATIO`` (44): a frame of n bytes raises the silo's peak RSS by at most 44 n over its
  RSS before: decoding peaks within ``PEAK_RATIO`` (40) n, the objects it decodes to within
  ``DECODE_RATIO`` (32) n, and its bytes (the read buffer, the frame, the body) take at most
  4 n more. Beyond the decode bound the connection is closed with a logged reason and the
  silo goes on serving.
"""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path
from typing import Any

import pytest

from orleanspy import RemoteGrainError, SiloUnavailableError
from orleanspy.ids import GrainId
from orleanspy.messaging.codec import PEAK_RATIO, Codec

from .bounds_app import latencies
from .silo_process import REPO_ROOT, SiloLauncher, SiloProcess, peak_rss, rss

pytestmark = pytest.mark.integration

APP = "tests.integration.bounds_app"
SECRET = "client-secret"
FRAME = 1 << 19  # about the size of each shape's frame
RSS_RATIO = PEAK_RATIO + 4

#: Each shape: the value sent as one argument, and whether the silo must refuse it (beyond
#: the bound) or serve it (within it).
SHAPES: dict[str, tuple[Any, bool]] = {
    "empty arrays": ([[]] * FRAME, True),
    "empty maps": ([{}] * FRAME, True),
    "nested empties": ([[[]]] * (FRAME // 2), True),
    "empty sets (ext)": ([set()] * (FRAME // 3), True),
    "decimals (ext)": ([Decimal(0)] * (FRAME // 3), True),
    "short strings": (["ab"] * (FRAME // 3), False),
    "small ints": ([300] * (FRAME // 3), False),
    "floats": ([1.5] * (FRAME // 9), False),
    "pairs (ext tuples)": ([(1, 2)] * (FRAME // 6), False),
}


async def test_a_frame_decodes_within_its_bound_or_closes_its_connection(
    silo_launcher: SiloLauncher,
) -> None:
    silo = await silo_launcher.start("--app", APP, secret=SECRET)
    async with silo.client() as steady:
        await latencies(steady, 20)
        before = rss(silo.pid)
        multiples: dict[str, float] = {}
        for name, (value, refused) in SHAPES.items():
            async with silo.client() as client:
                grain: Any = client.get_grain("Quick", name)
                if refused:
                    with pytest.raises(SiloUnavailableError):
                        await grain.take(value)
                else:
                    assert await grain.take(value) == 0, name
            size = len(Codec().packb([[value], None]))
            multiples[name] = (peak_rss(silo.pid) - before) / size
            await latencies(steady, 5)  # the silo serves others all along
    assert silo.alive
    print("peak RSS growth / frame size:", {k: round(v, 1) for k, v in multiples.items()})
    assert max(multiples.values()) <= RSS_RATIO, multiples
    log = silo.log_text()
    refusals = [line for line in log.splitlines()
                if '"connection_protocol_error"' in line and "decodes to more than" in line]
    assert len(refusals) == sum(refused for _, refused in SHAPES.values()), log[-3000:]


async def _error_of(silo: SiloProcess) -> RemoteGrainError | ValueError:
    async with silo.client() as client:
        try:
            await client.call(GrainId("Quick", "e"), "fail", ("boom",), None, 5.0)
        except (RemoteGrainError, ValueError) as exc:
            return exc
    raise AssertionError("the call did not fail")


async def test_error_replies_name_files_relative_unless_traceback_paths(
    silo_launcher: SiloLauncher, tmp_path: Path,
) -> None:
    config = tmp_path / "paths.toml"
    config.write_text("traceback_paths = true\n")
    plain = await silo_launcher.start("--app", APP, secret=SECRET)
    with_paths = await silo_launcher.start("--app", APP, "--config", str(config),
                                           secret=SECRET)
    tb = getattr(await _error_of(plain), "remote_traceback", "")
    assert 'File "tests/integration/bounds_app.py", line ' in tb, tb
    assert ", in fail" in tb and "ValueError: boom" in tb
    assert str(REPO_ROOT) not in tb and 'File "/' not in tb, tb
    full = getattr(await _error_of(with_paths), "remote_traceback", "")
    assert f'File "{REPO_ROOT / "tests/integration/bounds_app.py"}", line ' in full, full
