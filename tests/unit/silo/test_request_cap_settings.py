"""The request caps' settings: each checked with the rule that relates them, from any
layer, naming where a value came from."""

from __future__ import annotations

import pytest

from orleanspy import ConfigurationError, SiloOptions
from silo.config import load_config


def test_both_caps_set_together_in_the_environment_are_accepted_in_either_order() -> None:
    config = load_config(None, environ={"ORLEANSPY_MAX_CLIENT_REQUESTS": "600",
                                        "ORLEANSPY_MAX_CONNECTION_REQUESTS": "500"})
    assert (config.options.max_connection_requests,
            config.options.max_client_requests) == (500, 600)


def test_a_client_cap_below_the_connection_cap_names_both_sources() -> None:
    with pytest.raises(ConfigurationError, match=(
            r"max_client_requests = 100: must be >= max_connection_requests \(500\).*"
            r"max_connection_requests from environment variable "
            r"ORLEANSPY_MAX_CONNECTION_REQUESTS")):
        load_config(None, environ={"ORLEANSPY_MAX_CONNECTION_REQUESTS": "500",
                                   "ORLEANSPY_MAX_CLIENT_REQUESTS": "100"})


def test_a_connection_cap_above_the_default_client_cap_says_which_to_raise() -> None:
    with pytest.raises(ConfigurationError,
                       match=r"max_client_requests = 2000: must be >= max_connection_requests"):
        load_config(None, environ={"ORLEANSPY_MAX_CONNECTION_REQUESTS": "5000"})


@pytest.mark.parametrize(("fields", "message"), [
    ({"max_connection_requests": 1}, r"max_connection_requests = 1: must be >= 2"),
    ({"max_connection_requests": 10, "max_client_requests": 9},
     r"max_client_requests = 9: must be >= max_connection_requests \(10\)"),
])
def test_silo_options_refuse_caps_that_could_never_resume(
        fields: dict[str, int], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        SiloOptions(**fields)
