"""PostgreSQL back ends against the conformance suites, plus their own guarantees: schema
versions, checksums, processes racing on the membership table, dropped connections.

Each test runs in a schema of its own (the ``postgres_url`` fixture drops it afterwards).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orleanspy.cluster.membership import MembershipTable
from orleanspy.cluster.membership.postgres import PostgresMembershipTable
from orleanspy.reminders.base import ReminderTable
from orleanspy.reminders.postgres import PostgresReminderTable
from orleanspy.storage.base import GrainStorage
from orleanspy.storage.postgres import PostgresGrainStorage
from orleanspy.streams.adapters.base import QueueAdapterFactory
from orleanspy.streams.adapters.postgres import PostgresAdapterFactory
from orleanspy.testing.conformance import GrainStorageConformance, ReminderTableConformance
from orleanspy.testing.membership_conformance import MembershipTableConformance
from orleanspy.testing.stream_conformance import QueueAdapterConformance


class TestPostgresGrainStorageConformance(GrainStorageConformance):
    @pytest.fixture(autouse=True)
    def _postgres(self, postgres_url: str) -> None:
        self.url = postgres_url  # PostgreSQL reachable (else skipped, or failed under CI)

    async def make_storage(self, tmp_path: Path) -> GrainStorage:
        return PostgresGrainStorage(self.url)


class TestPostgresReminderTableConformance(ReminderTableConformance):
    @pytest.fixture(autouse=True)
    def _postgres(self, postgres_url: str) -> None:
        self.url = postgres_url

    async def make_table(self, tmp_path: Path) -> ReminderTable:
        return PostgresReminderTable(self.url)


class TestPostgresMembershipTableConformance(MembershipTableConformance):
    durable = True
    shared_storage = True

    @pytest.fixture(autouse=True)
    def _postgres(self, postgres_url: str) -> None:
        self.url = postgres_url

    async def make_table(self, tmp_path: Path) -> MembershipTable:
        return PostgresMembershipTable(self.url, cluster_id="conformance")


class TestPostgresAdapterConformance(QueueAdapterConformance):
    at_least_once = True
    durable = True

    @pytest.fixture(autouse=True)
    def _postgres(self, postgres_url: str) -> None:
        self.url = postgres_url

    async def make_factory(self, tmp_path: Path) -> QueueAdapterFactory:
        return PostgresAdapterFactory(self.url)


class TestPostgresRetainingAdapterConformance(QueueAdapterConformance):
    """Acknowledged rows kept for a while: still never read again."""

    at_least_once = True
    durable = True

    @pytest.fixture(autouse=True)
    def _postgres(self, postgres_url: str) -> None:
        self.url = postgres_url

    async def make_factory(self, tmp_path: Path) -> QueueAdapterFactory:
        return PostgresAdapterFactory(self.url, retention=3600)
