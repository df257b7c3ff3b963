"""Shared machinery of "value + noise" mechanisms on a grid.

A grid mechanism rounds its input to multiples of g = 2^k (exactly), adds integer noise sampled
exactly, and returns the result as exact floats (or int64 when g = 1 and the input is integer).
Its privacy map turns a real input distance into a distance in grid steps and asks the noise's
map for the loss. See :mod:`dpkit.noise.grid` for why this is safe on a real computer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from dpkit.core.framework import Measurement
from dpkit.core.losses import PrivacyLoss
from dpkit.core.spaces import AtomDomain, L1Distance, L2Distance, Measure, VectorDomain
from dpkit.errors import InvalidDataError, InvalidParameterError
from dpkit.noise.distributions import GridNoise, LatticeNoise
from dpkit.noise.grid import from_grid, grid_spacing, to_grid

__all__ = ["check_changed_coordinates", "integer_input", "make_grid_measurement"]


def check_changed_coordinates(value: int | None) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < 1:
        raise InvalidParameterError("changed_coordinates", value, "an integer >= 1 (or None)")
    return int(value)


def lattice_l1_steps(d_in: Fraction, exponent: int, changed: int | None) -> Fraction:
    """Largest L1 distance, in grid steps, between rounded inputs at real L1 distance d_in.

    Each coordinate that differs by a_i lands at most ⌈a_i/g⌉ <= a_i/g + 1 steps away, and only
    coordinates that differ count: Σ⌈a_i/g⌉ <= ⌈d_in/g⌉ + (c - 1) for c changed coordinates.
    """
    g = grid_spacing(exponent)
    return Fraction(math.ceil(d_in / g) + ((changed or 1) - 1))


def lattice_l2_steps(d_in: Fraction, exponent: int, changed: int | None) -> Fraction:
    """Upper bound (rational) on the L2 distance in grid steps: ||r(x)-r(y)||₂ <= d_in/g + √c
    for c changed coordinates (each moves by less than one step in rounding); scalars: ⌈d_in/g⌉."""
    g = grid_spacing(exponent)
    c = changed or 1
    if c == 1:
        return Fraction(math.ceil(d_in / g))
    root_c = Fraction(math.isqrt(c - 1) + 1)  # >= √c
    return d_in / g + root_c


def integer_input(data: Any, name: str = "data") -> np.ndarray:
    """Integer data as int64; refuses floats that are not whole numbers, NaN, inf and bools."""
    array = np.asarray(data)
    if array.dtype == bool or array.dtype.kind not in "iuf":
        raise InvalidDataError(name, f"expected integers, got dtype {array.dtype}")
    if array.dtype.kind == "f":
        if not np.all(np.isfinite(array)):
            raise InvalidDataError(name, "contains NaN or infinite values")
        if not np.all(array == np.round(array)):
            raise InvalidDataError(
                name,
                "contains non-integer values",
                "Use make_laplace / make_gaussian for real-valued data.",
            )
    if array.size and float(np.max(np.abs(array.astype(np.float64)))) >= 2.0**62:
        raise InvalidDataError(name, "a value is too large for exact int64 arithmetic")
    return array.astype(np.int64)


def make_grid_measurement(
    *,
    name: str,
    lattice: LatticeNoise,
    exponent: int,
    measure: Measure,
    metric: Literal["l1", "l2"],
    loss_of_steps: Callable[[Fraction], PrivacyLoss],
    sensitivity: Fraction,
    changed_coordinates: int | None,
    integer_output: bool = False,
    info: dict[str, Any] | None = None,
) -> Measurement[Any]:
    """Build the Measurement: round to grid, add ``lattice`` noise, map via ``loss_of_steps``."""
    steps_of = lattice_l1_steps if metric == "l1" else lattice_l2_steps

    def privacy_map(d_in: Fraction) -> PrivacyLoss:
        return loss_of_steps(steps_of(d_in, exponent, changed_coordinates))

    def function(data: Any) -> Any:
        scalar = np.ndim(data) == 0
        if integer_output:
            indices = integer_input(data)
        else:
            indices = to_grid(data, exponent)
            if (
                changed_coordinates is None
                and indices.size > 1
                and not np.array_equal(
                    from_grid(indices, exponent), np.asarray(data, dtype=np.float64)
                )
            ):
                raise InvalidDataError(
                    "data",
                    "a vector with values off the output grid "
                    f"2^{exponent}, so rounding may move several coordinates",
                    "Pass changed_coordinates=c (how many coordinates neighbouring inputs can "
                    "differ in) so the privacy map accounts for the rounding.",
                )
        noisy = indices.reshape(-1) + lattice.sample(indices.size)
        out = noisy if integer_output else from_grid(noisy, exponent)
        out = out.reshape(np.shape(data))
        return out.item() if scalar else out

    domain = VectorDomain(AtomDomain("int" if integer_output else "float"))
    return Measurement(
        input_domain=domain,
        input_metric=L1Distance() if metric == "l1" else L2Distance(),
        output_measure=measure,
        function=function,
        privacy_map=privacy_map,
        name=name,
        noise=GridNoise(lattice, exponent),
        d_in=sensitivity,
        info={"changed_coordinates": changed_coordinates or 1, **(info or {})},
    )
