"""Which failures of ``ray.init`` are Ray's token authentication (:func:`harness.sweep.cluster.refused_token`), and
the line each gives. tests/test_ray.py meets the real refusal, on a ``ray start --head`` that wants a token."""

from __future__ import annotations

import traceback

import pytest

from harness.sweep.cluster import refused_token

ADDRESS = "10.0.0.1:6379"


class AuthenticationError(Exception):
    """Stands for ``ray.exceptions.AuthenticationError``: ray is not imported into the test process (its import
    sets up logging on streams that pytest closes: tests/test_ray.py)."""


AuthenticationError.__module__ = "ray.exceptions"


def _as_ray_gives_up(last: Exception) -> ConnectionError:
    """What ``ray.init(address=...)`` raises once its attempts to reach the cluster are spent: a ConnectionError
    caused by a RuntimeError that holds the last attempt's traceback as text (``ray._private.node`` and
    ``ray._private.worker`` in Ray 2.60)."""
    try:
        raise last
    except Exception:
        text = traceback.format_exc()
    given_up = ConnectionError(f"Failed to connect to Ray cluster at {ADDRESS}")
    given_up.__cause__ = RuntimeError(f"Failed to connect to GCS. Last connection error: {text}")
    return given_up


NO_TOKEN_SENT = (f"--ray-address {ADDRESS}: the Ray cluster there requires token authentication and this sweep "
                 "sent no token (RAY_AUTH_MODE {}); run it with RAY_AUTH_MODE=token and the cluster's token in "
                 "~/.ray/auth_token (or RAY_AUTH_TOKEN, RAY_AUTH_TOKEN_PATH)")


@pytest.mark.parametrize("mode, said", [(None, "is not set"), ("disabled", "is 'disabled'")])
def test_a_cluster_that_refuses_a_driver_without_a_token_names_ray_auth_mode(monkeypatch, mode, said):
    if mode is None:
        monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    else:
        monkeypatch.setenv("RAY_AUTH_MODE", mode)
    refused = _as_ray_gives_up(AuthenticationError("RPC error: InvalidAuthToken: Authentication token is missing"))
    assert refused_token(refused, AuthenticationError, ADDRESS, "--ray-address") == NO_TOKEN_SENT.format(said)


def test_a_token_refused_or_missing_under_ray_auth_mode_token_says_where_the_token_goes(monkeypatch):
    monkeypatch.setenv("RAY_AUTH_MODE", "token")
    expected = (f"RAY_ADDRESS {ADDRESS}: Ray's token authentication (RAY_AUTH_MODE=token) failed: no token here, or "
                "not the cluster's; put the cluster's own token (ray get-auth-token on its head prints it) in "
                "~/.ray/auth_token, RAY_AUTH_TOKEN or the file RAY_AUTH_TOKEN_PATH names")
    wrong = _as_ray_gives_up(AuthenticationError("RPC error: InvalidAuthToken: token is missing or incorrect"))
    missing = AuthenticationError("Token authentication is enabled but no authentication token was found")
    assert refused_token(wrong, AuthenticationError, ADDRESS, "RAY_ADDRESS") == expected
    assert refused_token(missing, AuthenticationError, ADDRESS, "RAY_ADDRESS") == expected


@pytest.mark.parametrize("failure", [
    _as_ray_gives_up(TimeoutError("the cluster is starting")),
    _as_ray_gives_up(RuntimeError("another.module.AuthenticationError: not Ray's")),
    ValueError("When connecting to an existing cluster, num_cpus and num_gpus must not be provided."),
])
def test_any_other_failure_is_left_to_ray(monkeypatch, failure):
    monkeypatch.delenv("RAY_AUTH_MODE", raising=False)
    assert refused_token(failure, AuthenticationError, ADDRESS, "--ray-address") is None
