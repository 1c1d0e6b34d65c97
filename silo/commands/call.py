"""``orleanspy call``: call one grain method through a silo's gateway, print the result."""

from __future__ import annotations

import argparse
import asyncio
from typing import Any

from orleanspy import SiloUnavailableError
from silo.commands.common import (
    EXIT_CALL_FAILED,
    EXIT_OK,
    EXIT_USAGE,
    ClientSettings,
    GatewayUnreachable,
    add_client_arguments,
    client_settings,
    connect,
    error,
    error_text,
    render,
)
from silo.startup import configure_logging

__all__ = ["add_parser"]

_EPILOG = """\
ARGS are JSON when they parse as JSON (5, "5", [1,2], {"a":1}, true, null), else plain
strings. KEY is an int if it looks like one, else a string (--key-type forces a type).
The result is printed as JSON (or its repr if it is not JSON-compatible).
Exit codes: 0 ok; 1 the grain raised (stderr: "error: Type: message"); 2 the gateway is
unreachable, refused the handshake, or the arguments are wrong.

Example:
  orleanspy call --gateway 127.0.0.1:30000 Counter alice increment 5
  orleanspy call --gateway 127.0.0.1:30000 --gateway 127.0.0.1:30001 Counter alice get
"""


def add_parser(commands: Any) -> None:
    """Register ``call`` on the top-level subparsers."""
    call = commands.add_parser(
        "call", help="call a grain method through a silo gateway",
        description="Call one grain method through a silo's gateway and print the result.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_client_arguments(
        call, timeout=30.0,
        grain_help="grain type name (the class name unless @grain_type renames it)",
        method_help="method to call",
    )
    call.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    """Handle ``orleanspy call``."""
    settings = client_settings(args)
    configure_logging("console", "error")
    # results arrive as plain values (dataclasses as dicts): the CLI imports no application module
    return asyncio.run(_call(settings))


async def _call(settings: ClientSettings) -> int:
    try:
        async with connect(settings) as client:
            ref: Any = client.get_grain(settings.grain_type, settings.key)
            try:
                result = await ref.invoke(settings.method, *settings.args)
            except SiloUnavailableError as exc:
                error(f"lost the silo gateway ({settings.source}): {exc}")
                return EXIT_USAGE
            except Exception as exc:
                error(error_text(exc))
                return EXIT_CALL_FAILED
    except GatewayUnreachable as exc:
        error(str(exc))
        return EXIT_USAGE
    print(render(result), flush=True)
    return EXIT_OK
