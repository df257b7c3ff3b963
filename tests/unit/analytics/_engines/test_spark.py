"""Which SparkSession may read a Spark DataFrame's temporary views (no JVM is started)."""

from __future__ import annotations

from typing import Any

import pytest

pytest.importorskip("pyspark")

from dpkit.analytics._engines._spark import _same_session, is_connect


def _session(module: str, session_id: str | None = None) -> Any:
    kind = type("SparkSession", (), {"__module__": module})
    made = kind()
    if session_id is not None:
        made.session_id = session_id
    return made


CLASSIC = "pyspark.sql.session"
CONNECT = "pyspark.sql.connect.session"


def test_connect_objects_are_told_by_their_module() -> None:
    assert is_connect(_session(CONNECT, "a"))
    assert not is_connect(_session(CLASSIC))


def test_classic_and_connect_sessions_never_share_views() -> None:
    assert not _same_session(_session(CLASSIC), _session(CONNECT, "a"))
    assert not _same_session(_session(CONNECT, "a"), _session(CLASSIC))


def test_connect_sessions_share_views_only_with_the_same_server_session() -> None:
    own = _session(CONNECT, "a")
    assert _same_session(own, own)
    assert _same_session(_session(CONNECT, "a"), own)
    assert not _same_session(_session(CONNECT, "b"), own)


def test_classic_sessions_are_not_compared() -> None:
    assert _same_session(_session(CLASSIC), _session(CLASSIC))
