"""A silo's options turned into cluster parts: failure-detection settings, membership table."""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from orleanspy._util.urls import parse_backend_url
from orleanspy.cluster.membership.memory import MemoryMembershipTable
from orleanspy.cluster.membership.options import MembershipOptions
from orleanspy.cluster.membership.postgres import PostgresMembershipTable
from orleanspy.cluster.membership.redis import RedisMembershipTable
from orleanspy.cluster.membership.sqlite import SqliteMembershipTable
from orleanspy.errors import ConfigurationError

if TYPE_CHECKING:
    from orleanspy.cluster.membership.table import MembershipTable
    from orleanspy.runtime.options import SiloOptions

__all__ = ["membership_options_of", "open_membership_table"]


def membership_options_of(options: SiloOptions) -> MembershipOptions:
    """The failure-detection settings a silo's options name.

    Raises:
        ConfigurationError: ``probe_timeout`` exceeds ``probe_period``.
    """
    timeout = options.probe_period if options.probe_timeout is None else options.probe_timeout
    if timeout > options.probe_period:
        raise ConfigurationError(
            f"SiloOptions.probe_timeout = {timeout!r}: must be <= probe_period "
            f"({options.probe_period!r}), or probes would pile up"
        )
    fast = options.probe_period < 1.0
    return MembershipOptions(
        probe_period=options.probe_period,
        probe_timeout=timeout,
        i_am_alive_period=options.i_am_alive_period,
        table_refresh_period=options.table_refresh_period,
        # Fast detection (tests, demos) also gives up joining and forgets votes sooner.
        max_join_attempt_time=20.0 if fast else 300.0,
        death_vote_expiration_timeout=10.0 if fast else 120.0,
    )


def open_membership_table(url: str, cluster_id: str, data_dir: str) -> MembershipTable:
    """The table of a ``membership`` URL: ``memory``, ``sqlite:PATH`` (relative paths
    resolve against ``data_dir``; the folder is created), ``redis://HOST:PORT/DB?prefix=P``
    or ``postgresql://HOST:PORT/DB?schema=S``."""
    parsed = parse_backend_url(url, key="SiloOptions.membership", data_dir=data_dir,
                               allow=frozenset({"memory", "sqlite", "redis", "postgres"}),
                               example="sqlite:membership.db")
    if parsed.scheme == "memory":
        return MemoryMembershipTable()
    if parsed.scheme == "redis":
        return RedisMembershipTable(parsed.text, cluster_id=cluster_id)
    if parsed.scheme == "postgres":
        return PostgresMembershipTable(parsed.text, cluster_id=cluster_id)
    os.makedirs(os.path.dirname(parsed.path) or ".", exist_ok=True)
    return SqliteMembershipTable(parsed.path, cluster_id=cluster_id)
