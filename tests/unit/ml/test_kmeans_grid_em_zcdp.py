"""Review: KMeans(method="grid_em", rho=ρ) spends k pure-ε exponential-mechanism selections,
each ε_step²/2-zCDP, and reports their composition. ml/test_calibration.py checks the spend of
grid_em only under a pure ε budget (its sum compares ε with ε; under ρ the EM's ε and the
reported ρ are different units), so a mutant reporting k - 1 selections in
``KMeans._loss_and_steps`` (``compose(*([PureDP(step).to_zcdp()] * (k - 1)))``) passed every ml
unit test. Here the recorded selections' ε are converted to ρ before they are added up."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import dpkit.ml._kmeans as km
from dpkit.ml import KMeans


@pytest.mark.parametrize("k", [1, 3])
def test_grid_em_under_zcdp_reports_every_selection(
    monkeypatch: pytest.MonkeyPatch, k: int
) -> None:
    spent: list[Fraction] = []
    make = km.make_exponential

    def build(epsilon: Any, *args: Any, **kwargs: Any) -> Any:
        mechanism = make(epsilon, *args, **kwargs)

        def call(*a: Any, **kw: Any) -> Any:  # one selection, at this ε
            spent.append(Fraction(epsilon))
            return mechanism(*a, **kw)

        return call

    monkeypatch.setattr(km, "make_exponential", build)
    rng = np.random.default_rng(3)  # test data, not privacy noise
    x = np.clip(rng.normal(-0.5, 0.1, size=(200, 2)), -1, 1)
    rho = Fraction(1, 2)
    model = KMeans(k, bounds=(-1, 1), method="grid_em", rho=rho).fit(x)
    assert len(spent) == k
    zcdp = sum((e * e / 2 for e in spent), Fraction(0))
    assert zcdp <= model.privacy_loss_.rho <= rho
