"""Flow-control policies: who gates the cache, who may be spilled, when a group is complete."""

from __future__ import annotations

import pytest

from orleanspy.errors import ConfigurationError
from orleanspy.streams import FlowControl, FlowStrategy, parse_flow_control
from orleanspy.streams.flow_control import MaxFlowPolicy, MinFlowPolicy, TaggedFlowPolicy


def test_flow_min_policy_every_subscription_gates_and_laggards_spill() -> None:
    policy = parse_flow_control("min").policy
    assert isinstance(policy, MinFlowPolicy)
    assert policy.gates(member=False) and policy.spills and not policy.max_mode
    assert policy.revoke_after is None and policy.group_ready(0)


def test_flow_max_policy_nobody_gates_and_cursors_reseat() -> None:
    policy = parse_flow_control("max").policy
    assert isinstance(policy, MaxFlowPolicy)
    assert not policy.gates(member=False) and policy.max_mode and not policy.spills


def test_flow_tagged_policy_members_gate_until_their_timeout() -> None:
    control = parse_flow_control("tagged,group=archive,min=2,timeout=2s")
    policy = control.policy
    assert isinstance(policy, TaggedFlowPolicy)
    assert control.strategy is FlowStrategy.TAGGED
    assert policy.is_member("archive") and not policy.is_member("other")
    assert not policy.is_member(None)
    assert policy.gates(member=True) and not policy.gates(member=False)
    assert policy.waits_for_members and not policy.group_ready(1) and policy.group_ready(2)
    assert policy.revoke_after == 2.0 and not policy.spills


def test_flow_control_takes_the_strategy_as_text_or_enum() -> None:
    assert FlowControl("max") == FlowControl(FlowStrategy.MAX)
    assert FlowControl("max").strategy is FlowStrategy.MAX
    assert str(parse_flow_control("tagged,group=g")) == "tagged,group=g,min=1"
    with pytest.raises(ValueError):
        FlowControl("fastest")
    with pytest.raises(ConfigurationError):
        parse_flow_control("fastest")
