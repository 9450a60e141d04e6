"""Fixtures for real servers (tests/servers/harness.py): a private PostgreSQL cluster for the session, and a
`prefect server start` on it (or on SQLite) per test, stopped after it. Without root or PostgreSQL the tests
that need them skip; under CI (`CI` set, or EUROPA_REQUIRE_POSTGRES=1, which .ci/run sets) they fail instead."""

from __future__ import annotations

import os
from typing import Callable, Iterator

import pytest

from tests.servers.harness import Postgres, PrefectServer, missing

REQUIRE_ENV = "EUROPA_REQUIRE_POSTGRES"


def _require() -> None:
    reason = missing()
    if reason is None:
        return
    ci = os.environ.get("CI", "").strip().lower() not in ("", "0", "false", "no")
    if ci or os.environ.get(REQUIRE_ENV, "") == "1":
        pytest.fail(f"{reason} (CI or {REQUIRE_ENV}=1: the PostgreSQL tests must run here, not skip)", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    _require()
    pg = Postgres().start()
    try:
        yield pg
    finally:
        pg.stop()


@pytest.fixture
def prefect_server_factory(tmp_path) -> Iterator[Callable[..., PrefectServer]]:
    """prefect_server_factory(database_url=None) -> a started server; every one is stopped after the test."""
    started: list[PrefectServer] = []

    def start(database_url: str | None = None) -> PrefectServer:
        server = PrefectServer(tmp_path / f"prefect-server-{len(started)}", database_url).start()
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
