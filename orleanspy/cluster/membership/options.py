"""MembershipOptions: failure-detection and table settings of the membership service."""

from __future__ import annotations

from dataclasses import dataclass, fields

from orleanspy.errors import ConfigurationError

__all__ = ["MembershipOptions"]


@dataclass(frozen=True, slots=True, kw_only=True)
class MembershipOptions:
    """Durations are float seconds. Defaults follow Orleans' ``ClusterMembershipOptions``.

    With the defaults a crashed silo is declared dead after about 10-20 s: two missed direct
    probes (``probe_period`` 5 s each), then one indirect probe whose failure casts two votes
    at once, which meets ``num_votes_for_death_declaration``. ``MembershipOptions.fast()``
    detects a crash within about 1 s, for tests and demos.

    Attributes:
        num_probed_silos: how many other silos each active silo probes (ring successors).
        probe_period: time between the starts of two probe rounds.
        probe_timeout: a direct probe that has not answered by then has failed.
        num_missed_probes_limit: consecutive missed probes after which a silo votes; an
            indirect probe is tried one miss earlier.
        enable_indirect_probes: ask another silo to probe a silo that misses probes; if it
            cannot reach it either, both vote at once; if it can, the suspicion is dropped.
        num_votes_for_death_declaration: fresh votes that declare a silo dead (fewer in a
            cluster of fewer than 2 * votes - 1 active silos: a majority of them).
        death_vote_expiration_timeout: a vote older than this no longer counts.
        i_am_alive_period: how often a silo writes its I-am-alive time into the table.
        num_missed_i_am_alive_limit: a silo whose I-am-alive time is older than this many
            periods is stale: joining silos do not wait for it, votes do not count it.
        table_refresh_period: how often the table is read to learn of changes made by others
            (Orleans uses 60 s because its silos also gossip every change; until the transport
            gossips here too, a shorter period makes others notice a change sooner).
        max_join_attempt_time: how long a joining silo retries until it reaches every active
            silo; then ``start`` fails with ``MembershipError``.
        defunct_silo_expiration: DEAD rows older than this are deleted from the table.
        defunct_silo_cleanup_period: how often an active silo deletes them (None: never).
    """

    num_probed_silos: int = 3
    probe_period: float = 5.0
    probe_timeout: float = 5.0
    num_missed_probes_limit: int = 3
    enable_indirect_probes: bool = True
    num_votes_for_death_declaration: int = 2
    death_vote_expiration_timeout: float = 120.0
    i_am_alive_period: float = 30.0
    num_missed_i_am_alive_limit: int = 3
    table_refresh_period: float = 10.0
    max_join_attempt_time: float = 300.0
    defunct_silo_expiration: float = 7 * 24 * 3600.0
    defunct_silo_cleanup_period: float | None = 3600.0

    def __post_init__(self) -> None:
        for f in fields(self):
            name, value = f.name, getattr(self, f.name)
            if name == "enable_indirect_probes":
                ok, rule = isinstance(value, bool), "must be True or False"
            elif name.startswith("num_"):
                ok = type(value) is int and value >= 1
                rule = "must be an int >= 1"
            elif name == "defunct_silo_cleanup_period" and value is None:
                continue
            else:
                ok = type(value) in (int, float) and value > 0
                rule = "must be > 0 seconds"
            if not ok:
                raise ConfigurationError(f"MembershipOptions.{name} = {value!r}: {rule}")
        if self.probe_timeout > self.probe_period:
            raise ConfigurationError(
                f"MembershipOptions.probe_timeout = {self.probe_timeout!r}: must be <= "
                f"probe_period ({self.probe_period!r}), or probes would pile up"
            )

    @property
    def i_am_alive_expiration(self) -> float:
        """A silo whose I-am-alive time is older than this is stale."""
        return self.i_am_alive_period * self.num_missed_i_am_alive_limit

    @classmethod
    def fast(cls, **overrides: float | int | bool | None) -> MembershipOptions:
        """Settings that declare a crashed silo dead within about 1 s (tests, demos).

        Probes every 0.2 s, I-am-alive and table refresh every 0.5 s, joins give up after 5 s.
        Keyword arguments override single settings.
        """
        settings: dict[str, float | int | bool | None] = {
            "probe_period": 0.2,
            "probe_timeout": 0.2,
            "i_am_alive_period": 0.5,
            "table_refresh_period": 0.5,
            "death_vote_expiration_timeout": 10.0,
            "max_join_attempt_time": 5.0,
            "defunct_silo_cleanup_period": None,
        }
        settings.update(overrides)
        return cls(**settings)  # type: ignore[arg-type]
