"""A real silo checks a client's arguments against the method's annotations: ``True`` is
not an ``int`` (nor a ``float``), although Python's ``bool`` is a subclass of ``int``; the
caller gets the refusal naming the parameter, and the silo goes on serving."""

from __future__ import annotations

import pytest

from orleanspy.errors import MessageRejectedError

from .silo_process import SiloLauncher

APP = "tests.integration.bounds_app"
SECRET = "client-secret"


async def test_a_client_cannot_pass_a_bool_for_an_int_to_a_real_silo(
    silo_launcher: SiloLauncher,
) -> None:
    silo = await silo_launcher.start("--app", APP, secret=SECRET)
    async with silo.client() as client:
        grain = client.get_grain("Quick", "types")
        assert await grain.ping(3) == 3
        with pytest.raises(MessageRejectedError, match="'n' must be int, got bool True"):
            await grain.ping(True)
        assert await grain.ping(4) == 4  # the silo and the connection go on
