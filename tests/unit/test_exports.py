"""The public names: ``__all__`` of ``orleanspy`` and ``orleanspy.testing``."""

from __future__ import annotations

import importlib

import pytest

import orleanspy
from orleanspy import errors

MODULES = ["orleanspy", "orleanspy.testing", "orleanspy.streams", "orleanspy.storage"]


@pytest.mark.parametrize("name", MODULES)
def test_exports_all_is_sorted_without_duplicates(name):
    exported = importlib.import_module(name).__all__

    assert list(exported) == sorted(exported)
    assert len(set(exported)) == len(exported)


@pytest.mark.parametrize("name", MODULES)
def test_exports_every_name_exists(name):
    module = importlib.import_module(name)

    missing = [n for n in module.__all__ if not hasattr(module, n)]

    assert missing == []


@pytest.mark.parametrize("name", MODULES)
def test_exports_star_import_gives_exactly_all(name):
    namespace: dict[str, object] = {}
    exec(f"from {name} import *", namespace)

    assert set(namespace) - {"__builtins__"} == set(importlib.import_module(name).__all__)


#: The names an application writes against. A change here changes the public surface: keep
#: README.md and docs/ in step, and put rarely used names in their subpackage instead.
PUBLIC = [
    "ActivationFailedError", "AsyncStream", "ClientOptions", "ClusterClient",
    "ConfigurationError", "DeactivationReason", "DeadlockError", "Grain", "GrainCall",
    "GrainCallError",
    "GrainCallTimeoutError", "GrainInterface", "GrainRef", "GrainTimer",
    "InconsistentStateError", "MailboxFullError", "MessageRejectedError", "ObserverManager",
    "OrleansPyError",
    "PersistentState", "RemoteGrainError", "RequestContext", "SequenceToken",
    "SerializationError", "Silo",
    "SiloOptions", "SiloUnavailableError", "StreamError", "StreamId",
    "StreamSubscriptionHandle", "TickStatus", "allow_call_chain_reentrancy",
    "always_interleave", "call_chain_reentrant", "cancellable", "collection_age", "grain_type",
    "implicit_subscription", "mailbox", "may_interleave", "one_way", "persistent_state",
    "placement", "read_only", "reentrant", "serializable", "stateless_worker",
    "stream_handler", "system_filter",
]


def test_exports_top_level_all_is_pinned():
    assert sorted(orleanspy.__all__) == PUBLIC


@pytest.mark.parametrize("name", PUBLIC)
def test_exports_each_public_name_imports(name):
    namespace: dict[str, object] = {}
    exec(f"from orleanspy import {name}", namespace)

    assert namespace[name] is getattr(orleanspy, name)


@pytest.mark.parametrize(
    ("name", "home"),
    [
        ("GrainId", "orleanspy.ids"), ("SiloAddress", "orleanspy.ids"),
        ("OverflowPolicy", "orleanspy.grains.interface"),
        ("PlacementStrategy", "orleanspy.grains.interface"),
        ("SystemTarget", "orleanspy.runtime.system_target"),
        ("GrainProxy", "orleanspy.grains.proxy"),
        ("QueueCacheMissError", "orleanspy.errors"), ("StorageError", "orleanspy.errors"),
        ("PersistentStreamProvider", "orleanspy.streams"),
    ],
)
def test_exports_rarely_used_names_live_in_their_subpackage(name, home):
    assert name not in orleanspy.__all__
    assert hasattr(importlib.import_module(home), name)


def test_exports_one_reference_type():
    references = [n for n in orleanspy.__all__ if "Ref" in n]

    assert references == ["GrainRef"]


def test_exports_testing_helpers():
    import orleanspy.testing as testing

    assert set(testing.__all__) == {"EventCollector", "EventRecorder", "FakeClock", "TestCluster"}


@pytest.mark.parametrize(
    "name",
    [
        "Grain", "GrainRef", "Silo", "SiloOptions", "ClusterClient", "persistent_state",
        "reentrant",
        "call_chain_reentrant", "always_interleave", "may_interleave", "read_only", "one_way",
        "cancellable", "stateless_worker", "mailbox", "collection_age", "grain_type",
        "allow_call_chain_reentrancy", "GrainCallTimeoutError", "DeadlockError",
        "MailboxFullError", "RemoteGrainError", "SiloUnavailableError", "SerializationError",
        "MessageRejectedError", "InconsistentStateError", "ActivationFailedError",
    ],
)
def test_exports_documented_api_is_exported(name):
    assert name in orleanspy.__all__


def test_exports_errors_are_the_errors_module_classes():
    for name in orleanspy.__all__:
        if name.endswith("Error"):
            assert getattr(orleanspy, name) is getattr(errors, name)
            assert issubclass(getattr(orleanspy, name), errors.OrleansPyError)
