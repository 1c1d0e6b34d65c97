"""A silo's options turned into cluster settings: failure detection, the cluster key."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING

from orleanspy._util.sqlite import readable_by_others
from orleanspy.cluster.membership.options import MembershipOptions
from orleanspy.cluster.membership.sqlite import SqliteMembershipTable
from orleanspy.errors import ConfigurationError

if TYPE_CHECKING:
    from orleanspy.cluster.membership.table import MembershipTable
    from orleanspy.runtime.options import SiloOptions

__all__ = ["check_private", "cluster_key", "membership_options_of"]


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
        defunct_silo_expiration=options.defunct_silo_expiration,
        defunct_silo_cleanup_period=min(3600.0, options.defunct_silo_expiration),
    )


async def cluster_key(
    configured: str | None, table: MembershipTable, *, allow_readable: bool = False
) -> bytes:
    """The cluster key: ``SiloOptions.cluster_key`` (``configured``), else the one the
    membership table keeps (the table is opened to read it).

    Raises:
        ConfigurationError: the key would be read from a SQLite membership file that group
            or others can read, and ``allow_readable`` (``allow_readable_secrets``) is False.
    """
    if configured is not None:
        return configured.encode()
    await table.open()
    if isinstance(table, SqliteMembershipTable) and not allow_readable:
        check_private(table.path, "the membership file keeps the cluster key")
    key = await table.cluster_key()
    if key is None:
        raise ConfigurationError(
            f"SiloOptions.cluster_key is not set and the membership table {table!r} keeps "
            "no cluster key: set cluster_key (the same secret on every silo of the cluster)"
        )
    return key


def check_private(path: str, why: str) -> None:
    """Refuse a secret-holding file (and its SQLite ``-wal``/``-shm``) that group or others
    can read, as ssh refuses a private key: the error says how to fix it.

    Raises:
        ConfigurationError: such a file exists.
    """
    found = readable_by_others(path)
    if found:
        files = ", ".join(f"{name} (mode {mode:04o})" for name, mode in found)
        names = " ".join(shlex.quote(name) for name, _ in found)
        raise ConfigurationError(
            f"{files}: readable by group or others, and {why}: any local user who reads it "
            f"can pose as a silo. Run `chmod 600 {names}` (and `chmod 700` its folder), or "
            "accept it with allow_readable_secrets = true (--allow-readable-secrets)"
        )
