"""The two hypotheses every smooth-sensitivity proof starts from, checked on the releases dpkit
really makes.

Normalised by x's noise scale, a neighbour y's release is a + e^{b}·Z with |a| <= α (the shift:
the grid-rounded statistics differ by at most the smooth bound S(x), in units of the scale) and
|b| <= β_eff (the dilation: the scales differ by at most e^{β_eff}). The calibrations
(test_smooth_calibration_constants.py, test_bun_steinke_*.py) take these for granted; the slack
terms that make them true on a float grid (the +2g for rounding f to the grid, the inflation of
S by 1 + 2^-30 and the matching 2^-29 added to β) are invisible to any audit. Here the noise
samplers are intercepted: the scale is read and the noise set to zero, so the released grid
index is the rounded statistic itself. Over every dataset of n = 5 values from a set with gaps
that are not multiples of the grid, and every substitution neighbour, with β large enough that
S = LS at some datasets (so |f(x) − f(y)| = S(x) is attained):

    |c_x − c_y| <= α·scale_x      and      |ln scale_x − ln scale_y| <= β_eff,

exactly (Fractions of the floats read).
"""

from __future__ import annotations

import itertools
import math
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import dpkit.sensitivity._smooth as smooth_module
from dpkit.sensitivity._smooth import _BETA_SLACK, make_smooth_sensitivity

VALUES = (0.0, 0.1, 0.3, 0.5, 0.6, 0.7, 1.0)
N = 5


class Spy:
    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.scale: Fraction | None = None
        monkeypatch.setattr(smooth_module, "cauchy_lattice", self._lattice)
        monkeypatch.setattr(smooth_module, "discrete_laplace_wide", self._lattice)
        monkeypatch.setattr(smooth_module, "floor_scaled_noise", self._zcdp)

    def _lattice(self, scale: Any, *rest: Any) -> list[int]:
        self.scale = Fraction(scale)
        return [0] * rest[-1]

    def _zcdp(self, family: str, sigma: Any, d: int, c: Any, lo: int, hi: int, size: int) -> Any:
        self.scale = Fraction(c)  # the noise is ⌊c·Z⌋ grid steps: c is the scale
        return [0] * size


CASES = [
    ("cauchy", {"epsilon": 8, "beta": Fraction(1)}),
    ("laplace", {"epsilon": 8, "delta": Fraction(1, 10**6), "beta": Fraction(1, 10)}),
    ("uniform_log_normal", {"rho": 50, "beta": Fraction(1)}),
    ("student_t", {"rho": 50, "beta": Fraction(1, 2)}),
]


@pytest.mark.parametrize(("noise", "kw"), CASES, ids=[c[0] for c in CASES])
def test_shift_and_dilation_hypotheses_hold(
    monkeypatch: pytest.MonkeyPatch, noise: str, kw: dict[str, Any]
) -> None:
    """Killed: the +2g grid slack dropped, the 1 + 2^-30 inflation of S dropped, β without
    its 2^-29 slack."""
    m = make_smooth_sensitivity("median", lower=0, upper=1, n=N, noise=noise, **kw)
    spy = Spy(monkeypatch)
    release = m.info.release_many
    g = Fraction(2) ** m.info.grid_exponent
    z = m.info.zcdp_noise
    if z is None:
        shift_bound, dilation_bound = Fraction(m.info.alpha), m.info.beta + _BETA_SLACK
    else:
        shift_bound, dilation_bound = z.s, z.t
    seen: dict[tuple[float, ...], tuple[Fraction, Fraction]] = {}

    def read(x: tuple[float, ...]) -> tuple[Fraction, Fraction]:
        if x not in seen:
            centre = Fraction(float(release(np.array(x), 1)[0])) / g
            assert spy.scale is not None
            seen[x] = centre, spy.scale
        return seen[x]

    tight = Fraction(0)
    for x in itertools.combinations_with_replacement(VALUES, N):
        cx, sx = read(x)
        for i, v in itertools.product(range(N), VALUES):
            y = tuple(sorted((*x[:i], v, *x[i + 1 :])))
            cy, sy = read(y)
            assert abs(cx - cy) <= shift_bound * sx, (x, y, float(abs(cx - cy) / sx))
            tight = max(tight, abs(cx - cy) / (shift_bound * sx))
            ratio = max(sx / sy, sy / sx)
            assert ratio <= 1 or math.log(ratio) <= dilation_bound  # float log, checked below
            assert ratio**1 <= Fraction(math.exp(float(dilation_bound))) * (1 + Fraction(1, 2**50))
    assert tight > Fraction(999, 1000)  # the shift bound is attained: a slack would show


def test_grid_slack_covers_a_rounding_tie_when_the_smooth_bound_is_tiny(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """S(x) can be far below one grid step (here one float ulp: ten copies of v and of v' = v +
    ulp around the median, β = 4), while rounding to the grid moves the two medians a whole step
    apart (v' is a tie that rounds up to even, v rounds down). Only the +2g in the noise scale
    covers that step (the zCDP families have no minimum scale). Killed: the +2g dropped."""
    m = make_smooth_sensitivity(
        "median", lower=0, upper=1, n=22, rho=50, beta=4, noise="uniform_log_normal"
    )
    spy = Spy(monkeypatch)
    release = m.info.release_many
    g = Fraction(2) ** m.info.grid_exponent
    k = math.floor(Fraction(3, 10) / g) | 1  # odd: k + 1/2 rounds up to k + 1
    v_prime = float((k + Fraction(1, 2)) * g)
    v = math.nextafter(v_prime, 0.0)
    assert Fraction(v_prime) == (k + Fraction(1, 2)) * g and round(Fraction(v) / g) == k
    x = np.array([0.0] + [v] * 10 + [v_prime] * 10 + [1.0])  # median (rank 11): v
    y = np.array([0.0] + [v] * 9 + [v_prime] * 11 + [1.0])  # median: v'
    cx = Fraction(float(release(x, 1)[0])) / g
    assert spy.scale is not None
    sx = spy.scale
    cy = Fraction(float(release(y, 1)[0])) / g
    assert cy - cx == 1  # one grid step apart, for a change of one ulp
    z = m.info.zcdp_noise
    assert sx * z.s < 3  # the bound S(x) + 2g is almost all slack: S(x) is far below g
    assert abs(cy - cx) <= z.s * sx, (float(z.s * sx),)
