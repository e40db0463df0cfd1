"""The node under test, from the environment `tests/tests/clients.rs` sets: a real
node (PostgreSQL, the broker, a gRPC target) with the stored workflows `leaf` and
`review-text`, a token for everything, a token with a budget of 60 requests a minute,
and a control route that takes the node's database away for a while. The package is
the one `pip install clients/python` installed (the harness puts it on the path)."""

import os

import httpx
import pytest

from protomolt_client import Client


def env(name: str) -> str:
    value = os.environ.get(name)
    if not value:
        pytest.exit(f"{name} is not set: these tests run from tests/tests/clients.rs (./dev test)", 2)
    return value


@pytest.fixture(scope="session")
def url() -> str:
    return env("PROTOMOLT_URL")


@pytest.fixture(scope="session")
def token() -> str:
    return env("PROTOMOLT_TOKEN")


@pytest.fixture()
def node(url, token):
    with Client(url, token) as client:
        yield client


@pytest.fixture(scope="session")
def outage():
    """Takes the node's database away for `ms` milliseconds, starting now."""
    control = env("CLIENTS_CONTROL_URL")

    def take_away(ms: int) -> None:
        httpx.post(f"{control}/outage", params={"ms": ms}, timeout=10).raise_for_status()

    return take_away
