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


def test_exports_testing_helpers():
    import orleanspy.testing as testing

    assert set(testing.__all__) == {"EventCollector", "EventRecorder", "FakeClock", "TestCluster"}


@pytest.mark.parametrize(
    "name",
    [
        "Grain", "GrainRef", "Silo", "SiloOptions", "ClusterClient", "persistent_state",
        "reentrant",
        "call_chain_reentrant", "always_interleave", "read_only", "one_way",
        "stateless_worker", "mailbox", "collection_age", "grain_type",
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
