"""A silo's options turned into cluster settings: failure detection, the cluster key."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orleanspy.cluster.membership.options import MembershipOptions
from orleanspy.errors import ConfigurationError

if TYPE_CHECKING:
    from orleanspy.cluster.membership.table import MembershipTable
    from orleanspy.runtime.options import SiloOptions

__all__ = ["cluster_key", "membership_options_of"]


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


async def cluster_key(configured: str | None, table: MembershipTable) -> bytes:
    """The cluster key: ``SiloOptions.cluster_key`` (``configured``), else the one the
    membership table keeps (the table is opened to read it)."""
    if configured is not None:
        return configured.encode()
    await table.open()
    key = await table.cluster_key()
    if key is None:
        raise ConfigurationError(
            f"SiloOptions.cluster_key is not set and the membership table {table!r} keeps "
            "no cluster key: set cluster_key (the same secret on every silo of the cluster)"
        )
    return key
