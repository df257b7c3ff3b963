"""sample_and_aggregate refuses sizes it could not run in reasonable time before anything is
reserved (issue 21): output_shape=10,000 took 65 s after the charge (10^6: hours)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pandas as pd
import pytest

import dpkit as dp
from dpkit.analytics import Session
from dpkit.analytics._sample_aggregate import MAX_BLOCKS, MAX_OUTPUTS
from dpkit.errors import InvalidParameterError

_FRAME = pd.DataFrame({"u": np.arange(300), "x": np.linspace(0, 1, 300)})


def _run(session: Session, shape: Any, m: int = 10, n_range: tuple[int, int] = (100, 500)) -> Any:
    size = int(np.prod(shape))
    return session.sample_and_aggregate(
        lambda rows: np.zeros(size).reshape(shape),
        columns=["x"],
        output_range=(0, 1),
        n_range=n_range,
        m=m,
        epsilon=1,
        output_shape=shape,
    )


@pytest.mark.parametrize("shape", [MAX_OUTPUTS + 1, 10**6, (1000, 1000), (MAX_OUTPUTS, 2)])
def test_too_many_outputs_are_refused_before_the_reservation(shape: Any) -> None:
    session = Session(_FRAME, "u", dp.PureDP(10), max_rows=1)
    with pytest.raises(InvalidParameterError, match="output_shape"):
        _run(session, shape)
    assert session.spent == dp.PureDP(0)


def test_too_many_blocks_are_refused_before_the_reservation() -> None:
    session = Session(_FRAME, "u", dp.PureDP(10), max_rows=1)
    with pytest.raises(InvalidParameterError, match="blocks"):
        _run(session, 1, m=MAX_BLOCKS + 1, n_range=(10**9, 10**10))
    assert session.spent == dp.PureDP(0)


def test_a_shape_within_the_limit_is_released() -> None:
    session = Session(_FRAME, "u", dp.PureDP(10), max_rows=1)
    release = _run(session, (4, 4))
    assert release.table.shape == (1, 16)
    assert session.spent == dp.PureDP(1)
