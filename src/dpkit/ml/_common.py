"""Shared pieces of the private estimators: budgets, declared boxes, the public row map, noise.

Neighbouring relation: every estimator in :mod:`dpkit.ml` is private for datasets that differ by
adding or removing one row (unbounded DP). Replacing a row is two such steps (twice the loss).

The public row map (applied to every row before anything else, and the same for every dataset):

* a NaN coordinate becomes the midpoint of that coordinate's declared bounds;
* every coordinate (±inf included) is clamped into the declared bounds;
* the row is rescaled to [-1, 1]^d by the public affine map x ↦ (x - mid)/half, and rounded to a
  fixed-point grid of 2^-20 so that sums are computed exactly in int64.

Because the map is applied row by row and does not look at other rows, one row still changes at
most one row of the mapped data, and the mapped row lies in [-1, 1]^d: the L1 norm of a mapped
row is at most d and its L2 norm at most √d. Those are the sensitivities the estimators use; they
come from the declared bounds only, never from the data.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from fractions import Fraction
from typing import Any, Literal

import numpy as np
import scipy.sparse as sp

from dpkit._exact import check_delta, check_epsilon, check_rho, sqrt_upper
from dpkit.core.losses import ZCDP, PrivacyLoss, PureDP
from dpkit.errors import InvalidDataError, InvalidParameterError
from dpkit.mechanisms.gaussian import make_discrete_gaussian, make_gaussian
from dpkit.mechanisms.laplace import make_geometric, make_laplace

__all__ = [
    "FIXED_BITS",
    "Box",
    "Budget",
    "charged",
    "check_box",
    "check_budget",
    "check_columns",
    "map_rows",
    "sum_by_label",
]

FIXED_BITS = 20
_CAP = 2**50
_FIXED = float(2**FIXED_BITS)

Kind = Literal["pure", "zcdp"]


@dataclass(frozen=True)
class Budget:
    """A total budget of one kind (pure ε-DP or ρ-zCDP) and the noise that spends shares of it."""

    kind: Kind
    total: Fraction
    delta: Fraction | None = None
    """(ε, δ) budgets: δ, with ``total`` the largest ρ whose conversion fits (ε, δ)."""
    epsilon: Fraction | None = None
    """(ε, δ) budgets: the ε asked for."""

    def loss(self, amount: Fraction | None = None) -> PrivacyLoss:
        value = self.total if amount is None else amount
        return PureDP(value) if self.kind == "pure" else ZCDP(value)

    def reported(self, loss: PrivacyLoss) -> PrivacyLoss:
        """The loss to charge and report for a fit whose exact loss is ``loss`` (spent from
        this budget). For an (ε, δ) budget that is the certified (ε', δ) conversion of the
        zCDP loss (ε' <= ε): a ρ'-zCDP mechanism with ρ' <= ρ is also ρ-zCDP, so the smaller of
        the conversions of ρ' and of ρ is valid (both are rounded up exactly)."""
        if self.delta is None or self.epsilon is None:
            return loss
        if not isinstance(loss, ZCDP) or loss.rho > self.total:
            raise InvalidParameterError("loss", loss, f"a zCDP loss within ρ = {self.total}")
        converted = loss.to_approx(self.delta)
        if converted.epsilon > self.epsilon:  # not monotone by a hair: use the budget's own
            converted = ZCDP(self.total).to_approx(self.delta)
        if converted.epsilon > self.epsilon:  # pragma: no cover - rho_within guarantees this
            raise InvalidParameterError("epsilon", self.epsilon, "large enough for delta")
        return converted

    def noisy_counts(self, counts: np.ndarray, share: Fraction) -> np.ndarray:
        """Counts (sensitivity 1 in L1 and L2: one row is in one bin) plus exact integer noise."""
        if self.kind == "pure":
            m = make_geometric(1, epsilon=share)
        else:
            m = make_discrete_gaussian(1, rho=share)
        capped = np.minimum(np.asarray(counts, dtype=np.int64), _CAP)  # 1-Lipschitz: same Δ
        return np.asarray(m(capped), dtype=np.float64)

    def noisy_sums(self, sums: np.ndarray, share: Fraction, d: int) -> np.ndarray:
        """Sums of mapped rows per bin: one row changes one bin's d coordinates by at most 1 each
        (L1 <= d, L2 <= √d); released on the grid with exact Laplace / discrete Gaussian noise."""
        return self.noisy_vector(sums, share, Fraction(d), sqrt_upper(Fraction(d)), d)

    def noisy_vector(
        self, values: np.ndarray, share: Fraction, l1: Fraction, l2: Fraction, changed: int
    ) -> np.ndarray:
        """A real vector whose neighbours differ by at most ``l1`` in L1 / ``l2`` in L2, in at
        most ``changed`` coordinates: Laplace (pure) or Gaussian (zCDP) on the grid, exactly."""
        flat = np.asarray(values, dtype=np.float64).reshape(-1)
        if self.kind == "pure":
            m = make_laplace(l1, epsilon=share, changed_coordinates=changed)
        else:
            m = make_gaussian(l2, rho=share, changed_coordinates=changed)
        # clamping is 1-Lipschitz per coordinate (sensitivity unchanged) and keeps every value
        # inside the range the output grid represents exactly, whatever the number of rows
        limit = math.ldexp(float(_CAP), int(m.info["grid_exponent"]))
        flat = np.clip(flat, -limit, limit)
        return np.asarray(m(flat), dtype=np.float64).reshape(np.shape(values))

    def noise_std(self, share: Fraction, l1: Fraction, l2: Fraction) -> float:
        """Standard deviation of one coordinate's noise in :meth:`noisy_vector`."""
        if self.kind == "pure":
            return math.sqrt(2.0) * float(l1 / share)
        return float(l2) / math.sqrt(2.0 * float(share))

    def count_noise_scale(self, share: Fraction) -> float:
        """A typical magnitude of the count noise (for thresholds; post-processing only)."""
        if self.kind == "pure":
            return float(1 / share)
        return float((1 / (2 * share)) ** 0.5)


def check_budget(epsilon: Any, rho: Any, delta: Any = None) -> Budget:
    """Exactly one of ``epsilon`` (pure DP; with ``delta``, (ε, δ)-DP) and ``rho`` (zCDP).

    An (ε, δ) budget is spent as ρ-zCDP (Gaussian noise) with ρ the largest (on a fine grid)
    whose certified conversion (:meth:`dpkit.core.losses.ZCDP.to_approx`, rounded up) is at most
    ε at δ; the fit's loss is then reported and charged as that conversion, within (ε, δ)."""
    if (epsilon is None) == (rho is None):
        raise InvalidParameterError(
            "epsilon", epsilon, "given, or else rho (exactly one)", "Pass epsilon=… or rho=…."
        )
    if delta is not None:
        if epsilon is None:
            raise InvalidParameterError(
                "delta", delta, "given only with epsilon (an (ε, δ) budget), not with rho"
            )
        eps = check_epsilon(epsilon)
        dlt = check_delta(delta, allow_zero=False)  # (0, 1); omit delta for pure ε-DP
        return Budget("zcdp", rho_within(eps, dlt), delta=dlt, epsilon=eps)
    if epsilon is not None:
        return Budget("pure", check_epsilon(epsilon))
    return Budget("zcdp", check_rho(rho))


def rho_within(epsilon: Fraction, delta: Fraction) -> Fraction:
    """The largest ρ (a bisection to 2^-60 relative precision, every candidate checked exactly)
    with ``ZCDP(ρ).to_approx(δ).epsilon <= ε``; public (depends on ε and δ only)."""
    low, high = Fraction(0), epsilon
    for _ in range(60):
        mid = Fraction((low + high) / 2).limit_denominator(1 << 62)
        if mid <= low or mid >= high:
            break
        if ZCDP(mid).to_approx(delta).epsilon <= epsilon:
            low = mid
        else:
            high = mid
    if low <= 0:
        raise InvalidParameterError(
            "epsilon", epsilon, f"large enough for the Gaussian mechanism at delta = {delta}"
        )
    return low


@dataclass(frozen=True)
class Box:
    """Declared per-coordinate bounds [lower_j, upper_j], finite with lower_j < upper_j."""

    lower: np.ndarray
    upper: np.ndarray

    @property
    def d(self) -> int:
        return int(self.lower.size)

    @property
    def mid(self) -> np.ndarray:
        return (self.lower + self.upper) / 2

    @property
    def half(self) -> np.ndarray:
        return (self.upper - self.lower) / 2

    def unscale(self, scaled: np.ndarray) -> np.ndarray:
        return np.asarray(self.mid + scaled * self.half, dtype=np.float64)


def check_box(bounds: Any, name: str = "bounds", d: int | None = None) -> Box:
    """Validate declared bounds: a pair (lower, upper) of scalars or length-d sequences."""
    hint = (
        "Declare bounds=(lower, upper) from public knowledge (a scalar pair, or one value per "
        "feature); they are never read from the data. dpkit.analytics' private bounds "
        "estimator can find them at a cost."
    )
    if bounds is None:
        raise InvalidParameterError(name, bounds, "declared (lower, upper)", hint)
    try:
        lower_raw, upper_raw = bounds
        lower = np.atleast_1d(np.asarray(lower_raw, dtype=np.float64))
        upper = np.atleast_1d(np.asarray(upper_raw, dtype=np.float64))
    except (TypeError, ValueError):
        raise InvalidParameterError(
            name, bounds, "a pair (lower, upper) of numbers", hint
        ) from None
    if lower.ndim != 1 or upper.ndim != 1:
        raise InvalidParameterError(name, bounds, "scalars or 1-d sequences", hint)
    if d is not None:
        if lower.size == 1:
            lower = np.full(d, lower[0])
        if upper.size == 1:
            upper = np.full(d, upper[0])
    if lower.size != upper.size:
        raise InvalidParameterError(name, bounds, "lower and upper of the same length", hint)
    if d is not None and lower.size != d:
        raise InvalidParameterError(name, bounds, f"one bound per feature ({d})", hint)
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper))):
        raise InvalidParameterError(name, bounds, "finite", hint)
    if not np.all(lower < upper):
        raise InvalidParameterError(name, bounds, "lower < upper in every coordinate", hint)
    if float(np.max(np.abs(np.concatenate([lower, upper])))) > 1e150:
        raise InvalidParameterError(name, bounds, "of magnitude at most 1e150", hint)
    if not np.all((upper - lower) / 2 > 0):  # the row map divides by the half-width
        raise InvalidParameterError(
            name, bounds, "lower < upper with a half-width (upper - lower)/2 above 0", hint
        )
    return Box(lower.copy(), upper.copy())


def check_columns(shape: tuple[int, ...], d: int, name: str = "X") -> None:
    """The schema check on the shape alone (before any value is read)."""
    if len(shape) == 1 and d == 1:
        return
    if len(shape) != 2:
        raise InvalidDataError(name, f"expected a 2-d array (rows × features), got {len(shape)}-d")
    if shape[1] != d:
        raise InvalidDataError(
            name,
            f"has {shape[1]} columns but the declared bounds have {d}",
            "Declare one bound per feature.",
        )


def check_shape(X: Any, d: int, name: str = "X") -> np.ndarray:
    """The schema check (public): a numeric 2-d array with d columns; any number of rows."""
    try:
        array = np.asarray(X)
    except (TypeError, ValueError):
        raise InvalidDataError(name, "cannot be read as a 2-d numeric array") from None
    if array.ndim == 1 and d == 1:
        array = array.reshape(-1, 1)
    if array.dtype == object or array.dtype.kind not in "biuf":
        raise InvalidDataError(name, f"expected numbers, got dtype {array.dtype}")
    if array.ndim != 2:
        raise InvalidDataError(name, f"expected a 2-d array (rows × features), got {array.ndim}-d")
    if array.shape[1] != d:
        raise InvalidDataError(
            name,
            f"has {array.shape[1]} columns but the declared bounds have {d}",
            "Declare one bound per feature.",
        )
    return array


def map_rows(array: np.ndarray, box: Box, bits: int = FIXED_BITS) -> tuple[np.ndarray, np.ndarray]:
    """The public row map: NaN → midpoint, clamp to the box, scale to [-1, 1], fixed point.

    Returns (fixed-point int64 rows, the same rows as float64 in [-1, 1]). Never raises.
    """
    x = np.array(array, dtype=np.float64)  # a copy: the caller's array is never modified
    if x.size:
        nan = np.isnan(x)
        if nan.any():
            np.copyto(x, np.broadcast_to(box.mid, x.shape), where=nan)
        np.clip(x, box.lower, box.upper, out=x)
        x -= box.mid
        x /= box.half
        scaled = np.clip(x, -1.0, 1.0, out=x)
    else:
        scaled = np.zeros((0, box.d))
    unit = float(2**bits)
    fixed = np.rint(scaled * unit).astype(np.int64)
    return fixed, fixed / unit


def sum_by_label(fixed: np.ndarray, labels: np.ndarray, bins: int) -> tuple[np.ndarray, np.ndarray]:
    """Exact per-bin counts and sums of fixed-point rows (int64 arithmetic), as float64 values."""
    n = labels.size
    counts = np.bincount(labels, minlength=bins).astype(np.int64)
    if n == 0:
        return counts, np.zeros((bins, fixed.shape[1]))
    onehot = sp.csr_matrix(
        (np.ones(n, dtype=np.int64), (labels, np.arange(n))), shape=(bins, n), dtype=np.int64
    )
    sums = np.asarray(onehot @ fixed, dtype=np.int64)
    return counts, sums / _FIXED


@contextlib.contextmanager
def charged(
    loss: PrivacyLoss,
    ledger: Any,
    dataset: str | None,
    analyst: str | None,
    accountant: Any,
    what: str,
) -> Iterator[None]:
    """Reserve ``loss`` in the ledger (if one is given) before the body reads data; commit after.

    Give either ``ledger`` with ``dataset`` (and optionally ``analyst``), or an
    :class:`~dpkit.accounting.Accountant`. The budget must already exist. If the body raises,
    the reservation is marked failed (the charge stays: no refunds) and the error propagates.
    """
    from dpkit.accounting import Accountant
    from dpkit.ledger import Ledger

    reserve: Callable[[], Any] | None = None
    book: Ledger | None = None
    if accountant is not None:
        if not isinstance(accountant, Accountant):
            raise InvalidParameterError("accountant", accountant, "a dpkit Accountant or None")
        if ledger is not None:
            raise InvalidParameterError("ledger", ledger, "None when accountant is given")
        acc = accountant
        book = acc.ledger

        def reserve() -> Any:
            return acc.reserve(loss, query=what, mechanism=what)

    elif ledger is not None:
        if not isinstance(ledger, Ledger):
            raise InvalidParameterError("ledger", ledger, "a dpkit.ledger.Ledger or None")
        if dataset is None:
            raise InvalidParameterError(
                "dataset", dataset, "the dataset's name in the ledger when ledger is given"
            )
        led = ledger
        book = led

        def reserve() -> Any:
            return led.reserve(dataset, loss, analyst=analyst, query=what, mechanism=what)

    elif dataset is not None:
        raise InvalidParameterError("ledger", ledger, "given when dataset is given")
    if reserve is None or book is None:
        yield
        return
    reservation = reserve()
    try:
        yield
    except BaseException as exc:
        with contextlib.suppress(Exception):
            book.fail(reservation, type(exc).__name__)
        raise
    book.commit(reservation)


def int_seed() -> int:
    """A seed for post-processing helpers (k-means++ on a private coreset), from dpkit.noise."""
    from dpkit.noise import generator

    return int(generator(1).integers(0, 2**31 - 1))
