"""PostgreSQL URLs through the one back-end parser, and the back ends each setting opens."""

from __future__ import annotations

import pytest

from orleanspy._util.postgres import redact, split_schema
from orleanspy._util.urls import parse_backend_url
from orleanspy.cluster.membership.postgres import PostgresMembershipTable
from orleanspy.errors import ConfigurationError
from orleanspy.hosting.builder import (
    open_grain_storage,
    open_membership_table,
    open_reminder_table,
    queue_lease_store,
)
from orleanspy.reminders.postgres import PostgresReminderTable
from orleanspy.runtime.options import BACKENDS_OF
from orleanspy.storage.postgres import PostgresGrainStorage
from orleanspy.streams.postgres_leases import PostgresQueueLeaseStore

URL = "postgresql://u:secret@db.example:5432/app?schema=prod"


@pytest.mark.parametrize("url", [URL, "postgres://u@h/db"])
def test_postgres_urls_parse_for_every_setting(url: str) -> None:
    for key, allowed in BACKENDS_OF.items():
        parsed = parse_backend_url(url, key=key, allow=allowed)
        assert (parsed.scheme, parsed.text) == ("postgres", url)


def test_a_postgres_url_where_it_is_not_allowed_names_the_accepted_forms() -> None:
    with pytest.raises(ConfigurationError, match=r"unknown back end; use memory \| sqlite:PATH"):
        parse_backend_url(URL, key="x", allow=frozenset({"memory", "sqlite"}))
    with pytest.raises(ConfigurationError, match="no host named"):
        parse_backend_url("postgresql://", key="x")


def test_the_schema_comes_from_the_url_and_the_password_is_hidden() -> None:
    assert split_schema(URL) == ("postgresql://u:secret@db.example:5432/app", "prod")
    assert split_schema("postgresql://h/db")[1] == "orleanspy"
    assert redact(URL) == "postgresql://u:***@db.example:5432/app?schema=prod"
    with pytest.raises(ConfigurationError, match="schema 'Bad-Name'"):
        split_schema("postgresql://h/db?schema=Bad-Name")


def test_each_setting_opens_its_postgres_back_end() -> None:
    assert isinstance(open_grain_storage(URL, "."), PostgresGrainStorage)
    assert isinstance(open_reminder_table(URL, "."), PostgresReminderTable)
    table = open_membership_table(URL, "c1", ".")
    assert isinstance(table, PostgresMembershipTable)
    store = queue_lease_store(table)
    assert isinstance(store, PostgresQueueLeaseStore)
    assert store.cluster_id == "c1"
