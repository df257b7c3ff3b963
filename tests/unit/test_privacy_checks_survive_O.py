"""Issue 22: the internal privacy checks are raises, not ``assert`` statements (which
``python -O`` removes). Each check fires when its calibration is broken (monkeypatched), and the
modules hold no ``assert`` on a loss."""

from __future__ import annotations

import ast
from fractions import Fraction
from pathlib import Path

import pytest

from dpkit.core._losses import ZCDP
from dpkit.errors import PrivacyCheckError
from dpkit.sensitivity import _bun_steinke as bun_steinke
from dpkit.workloads import _residual

SRC = Path(__file__).resolve().parents[2] / "src" / "dpkit"


def test_bun_steinke_refuses_a_calibration_that_claims_more_than_its_budget(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    honest = bun_steinke.epsilon_upper
    monkeypatch.setattr(
        bun_steinke, "epsilon_upper", lambda *a: honest(*a) * 2 + Fraction(1, 10**6)
    )
    with pytest.raises(PrivacyCheckError, match="internal check failed"):
        bun_steinke.calibrate("laplace_log_normal", Fraction(1, 2), Fraction(1, 10))


def test_residual_planner_refuses_a_plan_above_its_budget(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_residual.ResidualPlan, "loss", lambda self: ZCDP(self.rho * 2))
    with pytest.raises(PrivacyCheckError, match="exceeds the budget"):
        _residual.plan_residuals([2, 3], [(0,), (0, 1)], Fraction(1, 2))


@pytest.mark.parametrize("path", ["workloads/_residual.py", "sensitivity/_bun_steinke.py"])
def test_no_assert_statements_on_losses(path: str) -> None:
    tree = ast.parse((SRC / path).read_text(encoding="utf-8"))
    asserts = [ast.unparse(node.test) for node in ast.walk(tree) if isinstance(node, ast.Assert)]
    assert not [a for a in asserts if any(w in a for w in ("rho", "eps", "claimed", "loss"))]
