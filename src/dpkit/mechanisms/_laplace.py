"""The Laplace mechanism on a grid, and the geometric (discrete Laplace) mechanism.

Guarantee: ``make_laplace(sensitivity=Δ, epsilon=ε)`` is ε-DP for inputs at L1 distance <= Δ.

Reason: the released value is n·g with n = round(x/g) + Z and P(Z = z) ∝ e^{-|z|/t}. Inputs at
distance <= Δ round to lattice points at most s = ⌈Δ/g⌉ apart (:mod:`dpkit.noise._grid`), and for
every output n, p(n - a)/p(n - b) = e^{(|n-b| - |n-a|)/t} <= e^{|a-b|/t} <= e^{s/t}. The scale is
calibrated as t = s/ε, so the loss is exactly ε (Ghosh, Roughgarden & Sundararajan 2009 for the
geometric mechanism; Dwork et al. 2006 for Laplace, of which this is the exact discretisation).
With the default grid (a millionth of the scale), accuracy matches the continuous Laplace
mechanism to six digits: E|noise| = Δ/ε, Var = 2(Δ/ε)².
"""

from __future__ import annotations

from fractions import Fraction
from typing import Any

from dpkit._exact import Number, check_epsilon, check_positive, sensitivity_of
from dpkit.core._framework import Measurement
from dpkit.core._losses import PureDP
from dpkit.errors import InvalidParameterError
from dpkit.mechanisms._additive import check_changed_coordinates, make_grid_measurement
from dpkit.mechanisms._info import AdditiveInfo
from dpkit.noise._distributions import DiscreteLaplace
from dpkit.noise._grid import choose_exponent, grid_spacing, grid_steps

__all__ = ["make_geometric", "make_laplace"]


def _check_grid_exponent(value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or not -1000 <= value <= 1000:
        raise InvalidParameterError("grid_exponent", value, "an integer in [-1000, 1000] or None")
    return value


def _sensitivity(value: Number) -> Fraction:
    sensitivity = sensitivity_of("sensitivity", value)
    if sensitivity <= 0:
        raise InvalidParameterError(
            "sensitivity",
            value,
            "> 0",
            "A query whose output cannot change needs no noise; check the bounds you declared.",
        )
    return sensitivity


def make_laplace(
    sensitivity: Number,
    epsilon: Number | None = None,
    *,
    scale: Number | None = None,
    grid_exponent: int | None = None,
    changed_coordinates: int | None = None,
) -> Measurement[Any]:
    """Laplace noise on a grid of spacing 2^k: ε-DP for inputs within L1 distance ``sensitivity``.

    Args:
        sensitivity: Δ, the largest L1 distance between the query's values on neighbours.
        epsilon: the privacy loss to calibrate for (give this or ``scale``).
        scale: the noise scale b instead of ε (then ε = ⌈Δ/g⌉·g/b).
        grid_exponent: k in g = 2^k; default: g ≈ b·2⁻²⁰.
        changed_coordinates: for vector inputs off the grid, how many coordinates two
            neighbouring inputs can differ in (rounding adds up to one step per coordinate).

    Returns:
        A Measurement releasing a float (for a scalar) or an array of floats, all multiples of g.
        ``.noise`` has the pmf, cdf, E|noise|, variance and confidence intervals.

    Example:
        >>> import dpkit as dp
        >>> m = dp.make_laplace(sensitivity=1, epsilon=0.5)
        >>> m.loss
        PureDP(epsilon=Fraction(1, 2))
        >>> round(m.noise.expected_abs(), 4)
        2.0
    """
    delta_f = _sensitivity(sensitivity)
    exponent_arg = _check_grid_exponent(grid_exponent)
    changed = check_changed_coordinates(changed_coordinates)
    if (epsilon is None) == (scale is None):
        raise InvalidParameterError("epsilon", epsilon, "given, or else scale (exactly one)")
    if epsilon is not None:
        eps = check_epsilon(epsilon)
        exponent = exponent_arg if exponent_arg is not None else choose_exponent(delta_f / eps)
        steps = grid_steps(delta_f, exponent) + (changed or 1) - 1
        t = Fraction(steps) / eps  # lattice scale: loss for `steps` steps is exactly ε
    else:
        assert scale is not None  # exactly one of them: checked above
        b = check_positive("scale", scale)
        exponent = exponent_arg if exponent_arg is not None else choose_exponent(b)
        t = b / grid_spacing(exponent)
    lattice = DiscreteLaplace(t)
    return make_grid_measurement(
        name="laplace",
        lattice=lattice,
        exponent=exponent,
        measure="pure",
        metric="l1",
        loss_of_steps=lambda steps: PureDP(steps / t),
        sensitivity=delta_f,
        changed_coordinates=changed,
        info=AdditiveInfo(scale=t * grid_spacing(exponent), grid_exponent=exponent),
    )


def make_geometric(
    sensitivity: Number,
    epsilon: Number | None = None,
    *,
    scale: Number | None = None,
) -> Measurement[Any]:
    """The geometric mechanism (discrete Laplace) for integer data: ε-DP at L1 distance Δ.

    Adds Z with P(Z = z) ∝ e^{-|z|·ε/Δ} to each integer (Ghosh, Roughgarden & Sundararajan 2009),
    sampled exactly. Releases int64. ``sensitivity`` is rounded up to an integer (integer inputs
    are never closer than that).

    Example:
        >>> import dpkit as dp
        >>> dp.make_geometric(sensitivity=1, epsilon=1).loss
        PureDP(epsilon=Fraction(1, 1))
    """
    delta_f = _sensitivity(sensitivity)
    if (epsilon is None) == (scale is None):
        raise InvalidParameterError("epsilon", epsilon, "given, or else scale (exactly one)")
    steps = grid_steps(delta_f, 0)
    if epsilon is not None:
        t = Fraction(steps) / check_epsilon(epsilon)
    else:
        assert scale is not None  # exactly one of them: checked above
        t = check_positive("scale", scale)
    return make_grid_measurement(
        name="geometric",
        lattice=DiscreteLaplace(t),
        exponent=0,
        measure="pure",
        metric="l1",
        loss_of_steps=lambda s: PureDP(s / t),
        sensitivity=delta_f,
        changed_coordinates=None,
        integer_output=True,
        info=AdditiveInfo(scale=t),
    )
