"""Shared machinery of "value + noise" mechanisms on a grid.

A grid mechanism rounds its input to multiples of g = 2^k (exactly), adds integer noise sampled
exactly, and returns the result as exact floats (or int64 when g = 1 and the input is integer).
Its privacy map turns a real input distance into a distance in grid steps and asks the noise's
map for the loss. See :mod:`dpkit.noise._grid` for why this is safe on a real computer.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from dpkit.core._framework import Measurement, MechanismInfo
from dpkit.core._losses import PrivacyLoss
from dpkit.core._spaces import AtomDomain, L1Distance, L2Distance, Measure, VectorDomain
from dpkit.errors import InvalidDataError, InvalidParameterError
from dpkit.mechanisms._info import AdditiveInfo
from dpkit.noise._distributions import GridNoise, LatticeNoise
from dpkit.noise._grid import SATURATION, add_saturating, grid_spacing, release_on_grid, to_grid

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
    """Data as int64 grid indices at g = 1: integers as they are, floats rounded half-up (the
    same shift-consistent rounding as the grid), everything saturating at ±2^62.

    Refuses only what is decided by the dtype (bools, text, objects: public) and NaN (at no
    finite distance from any input). A value's size never causes a refusal: if 2^62 were refused
    and its neighbour 2^62 - 1 released, the exception would tell them apart.
    """
    if isinstance(data, Fraction | int) and not isinstance(data, bool):
        return to_grid(data, 0, name)
    array = np.asarray(data)
    if array.dtype == bool or array.dtype.kind not in "iuf":
        raise InvalidDataError(name, f"expected integers, got dtype {array.dtype}")
    if array.dtype.kind == "f":
        return to_grid(array, 0, name)
    if array.dtype.kind == "u":
        return np.minimum(array, np.uint64(SATURATION)).astype(np.int64)
    return np.clip(array.astype(np.int64), -SATURATION, SATURATION)


def _vector_needs_slack(data: Any, integer_output: bool) -> bool:
    """Whether a vector input can be moved by rounding in several coordinates: decided from its
    shape and dtype only (public), never from its values."""
    array = np.asarray(data)
    if array.size <= 1:
        return False
    return not (integer_output and array.dtype.kind in "iu")


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
    info: MechanismInfo | None = None,
) -> Measurement[Any]:
    """Build the Measurement: round to grid, add ``lattice`` noise, map via ``loss_of_steps``."""
    steps_of = lattice_l1_steps if metric == "l1" else lattice_l2_steps

    def privacy_map(d_in: Fraction) -> PrivacyLoss:
        return loss_of_steps(steps_of(d_in, exponent, changed_coordinates))

    def function(data: Any) -> Any:
        scalar = np.ndim(data) == 0
        if changed_coordinates is None and _vector_needs_slack(data, integer_output):
            # decided by shape and dtype, before any value is looked at: whether the values
            # happen to sit on the grid is private, so it must not decide between release and
            # refusal (it did before: [3.0, 5.0] released and [3.0, 5.3] raised)
            raise InvalidDataError(
                "data",
                f"a vector of {np.size(data)} values, and rounding to the output grid can move "
                "every coordinate that differs between neighbours by a step",
                "Pass changed_coordinates=c (how many coordinates neighbouring inputs can differ "
                "in; the vector's length if any may) so the privacy map charges c - 1 extra "
                "rounding steps.",
            )
        if integer_output:
            indices = integer_input(data)
            out = add_saturating(indices.reshape(-1), lattice.sample(indices.size))
        else:
            # exact at every magnitude: no saturation of a value beyond 2^62 grid steps
            out = release_on_grid(data, exponent, lattice.sample(int(np.size(data))))
        out = out.reshape(np.shape(data))
        return out.item() if scalar else out

    def release_many(data: Any, n: int) -> np.ndarray:
        """``n`` independent releases of one scalar input, through the same rounding, noise and
        saturation as ``function`` (for audits and simulation: each costs the full loss)."""
        if np.ndim(data) != 0:
            raise InvalidDataError("data", "release_many takes one scalar input")
        if not integer_output:
            scalar = data if isinstance(data, Fraction | int) else float(data)
            if isinstance(scalar, float):
                return release_on_grid(np.full(int(n), scalar), exponent, lattice.sample(int(n)))
            return release_on_grid(scalar, exponent, lattice.sample(int(n)))
        index = integer_input(data)
        tiled = np.full(int(n), int(index), dtype=np.int64)
        return add_saturating(tiled, lattice.sample(int(n)))

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
        info=replace(
            info if info is not None else AdditiveInfo(),
            changed_coordinates=changed_coordinates or 1,
            release_many=release_many,
        ),
    )
