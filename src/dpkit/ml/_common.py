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

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal
from fractions import Fraction
from typing import Any, Literal, TypeVar

import numpy as np
import scipy.sparse as sp

from dpkit._arrays import as_float64
from dpkit._exact import check_delta, check_epsilon, check_rho, sqrt_upper
from dpkit.core._losses import ZCDP, PrivacyLoss, PureDP
from dpkit.errors import InvalidDataError, InvalidParameterError
from dpkit.mechanisms._gaussian import make_discrete_gaussian, make_gaussian
from dpkit.mechanisms._laplace import make_geometric, make_laplace
from dpkit.noise._grid import choose_exponent

T = TypeVar("T")

__all__ = [
    "BOUNDS_FORMS",
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
GRID_FLOOR = -10
"""The finest output grid (2^-10) of the fits' noisy sums: see :meth:`Budget.grid_exponent`."""
LOSS_FLOOR = Fraction(1, 10**6)
"""The smallest ε (ρ) any one release of a fit may get; the same floor as a Session query's
(:data:`dpkit.analytics._session.QUERY_LOSS_FLOOR`)."""
LOSS_CEILING = Fraction(10**9)
"""The largest ε (ρ) a fit may be given: every release is then exact to its grid (counts to
the integer, sums to 2^-10), so no larger value changes an answer."""
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
    given: Any = None
    """The ε or ρ as the caller wrote it (for error messages)."""

    @property
    def parameter(self) -> str:
        """The caller's name for this budget: "rho" for a ρ budget, else "epsilon"."""
        return "rho" if self.kind == "zcdp" and self.epsilon is None else "epsilon"

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

    def grid_exponent(self, share: Fraction, l1: Fraction, l2: Fraction) -> int:
        """The output grid 2^k of :meth:`noisy_vector` (public: from the share and the
        sensitivities only). It is the mechanisms' default (a 2^-20 fraction of the Laplace
        scale, 2^-12 of the Gaussian σ) but never finer than 2^-10 (:data:`GRID_FLOOR`):
        values are clamped to ±2^50 grid steps, so a grid finer than that would clamp sums of
        more than a few thousand rows at a large ε (ε = 10^6 used to return a coefficient of
        1.98 for 0.5). At 2^-10 sums of up to 2^40 rows pass unclamped at every ε; any grid is
        exact for privacy (the calibration counts grid steps)."""
        if self.kind == "pure":
            default = choose_exponent(l1 / share)
        else:  # floor(log2 σ) - 12 with σ² = l2²/(2ρ), from the exact square (no overflow)
            default = choose_exponent(l2 * l2 / (2 * share), 0) // 2 - 12
        return max(default, GRID_FLOOR)

    def noisy_vector(
        self, values: np.ndarray, share: Fraction, l1: Fraction, l2: Fraction, changed: int
    ) -> np.ndarray:
        """A real vector whose neighbours differ by at most ``l1`` in L1 / ``l2`` in L2, in at
        most ``changed`` coordinates: Laplace (pure) or Gaussian (zCDP) on the grid, exactly."""
        flat = np.asarray(values, dtype=np.float64).reshape(-1)
        exponent = self.grid_exponent(share, l1, l2)
        if self.kind == "pure":
            m = make_laplace(l1, epsilon=share, changed_coordinates=changed, grid_exponent=exponent)
        else:
            m = make_gaussian(l2, rho=share, changed_coordinates=changed, grid_exponent=exponent)
        # clamping is 1-Lipschitz per coordinate (sensitivity unchanged) and keeps every value
        # inside the range the output grid represents exactly, whatever the number of rows
        limit = math.ldexp(float(_CAP), exponent)
        flat = np.clip(flat, -limit, limit)
        return np.asarray(m(flat), dtype=np.float64).reshape(np.shape(values))

    def noise_std(self, share: Fraction, l1: Fraction, l2: Fraction) -> float:
        """An upper bound on the standard deviation of one coordinate's error in
        :meth:`noisy_vector`: the noise, plus half a grid step for the rounding (which matters
        only at a large ε, where the grid floor is coarser than the noise)."""
        half_step = math.ldexp(0.5, self.grid_exponent(share, l1, l2))
        if self.kind == "pure":
            noise = math.sqrt(2.0) * float(l1 / share)
        else:
            noise = float(l2) / math.sqrt(2.0 * float(share))
        return math.hypot(noise, half_step)

    def check_share(self, share: Fraction, what: str) -> None:
        """Refuse (before anything is reserved) a budget that leaves ``what`` less than
        :data:`LOSS_FLOOR` (ε, or ρ for zCDP and (ε, δ) budgets): below it the noise of a
        count no longer fits the exact samplers' int64 range, which used to fail after the
        charge (ε = 1e-300: OverflowError)."""
        if share >= LOSS_FLOOR:
            return
        unit = "ε" if self.kind == "pure" else "ρ"
        raise InvalidParameterError(
            self.parameter,
            self.given,
            f"large enough that {what} gets {unit} >= {float(LOSS_FLOOR):g} (it would get "
            f"{float(share):.3g})",
            "Noise for a smaller share would swamp any answer (the same floor as a Session "
            "query). Give more budget, or fewer iterations or clusters.",
        )

    def count_noise_scale(self, share: Fraction) -> float:
        """A typical magnitude of the count noise (for thresholds; post-processing only)."""
        if self.kind == "pure":
            return float(1 / share)
        return float((1 / (2 * share)) ** 0.5)


def check_budget(epsilon: Any, rho: Any, delta: Any = None) -> Budget:
    """Exactly one of ``epsilon`` (pure DP; with ``delta``, (ε, δ)-DP) and ``rho`` (zCDP).

    An (ε, δ) budget is spent as ρ-zCDP (Gaussian noise) with ρ the largest (on a fine grid)
    whose certified conversion (:meth:`dpkit.core._losses.ZCDP.to_approx`, rounded up) is at most
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
        eps = _at_most_ceiling("epsilon", check_epsilon(epsilon), epsilon)
        dlt = check_delta(delta, allow_zero=False)  # (0, 1); omit delta for pure ε-DP
        return Budget("zcdp", rho_within(eps, dlt), delta=dlt, epsilon=eps, given=epsilon)
    if epsilon is not None:
        eps = _at_most_ceiling("epsilon", check_epsilon(epsilon), epsilon)
        return Budget("pure", eps, given=epsilon)
    return Budget("zcdp", _at_most_ceiling("rho", check_rho(rho), rho), given=rho)


def _at_most_ceiling(name: str, value: Fraction, given: Any) -> Fraction:
    if value > LOSS_CEILING:
        raise InvalidParameterError(
            name,
            given,
            f"at most {float(LOSS_CEILING):g}",
            "Beyond it every release of a fit is already exact to its grid (counts to the "
            "integer, sums to 2^-10), so a larger value would change no answer.",
        )
    return value


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


BOUNDS_FORMS = (
    "one pair (lo, hi) for every feature, one pair per feature [(lo_1, hi_1), ..., "
    "(lo_d, hi_d)] (as dpkit.analytics writes bounds), or {'lower': [...], 'upper': [...]}"
)
"""The accepted forms of declared bounds, shown by every refusal."""

_BOUNDS_HINT = (
    "Bounds are declared from public knowledge, never read from the data "
    "(dpkit.analytics' private bounds estimator can find them at a cost)."
)


def short_repr(value: Any) -> Any:
    """``value`` itself for an error message, or a truncated repr when it is long."""
    text = repr(value)
    return value if len(text) <= 120 else text[:100] + "…"


def _real(value: Any) -> float | None:
    """A real number as a float (ints, floats, fractions, decimals, numpy numbers, 0-d
    arrays), or None for anything else: bools, strings, sequences, complex numbers."""
    if isinstance(value, np.ndarray) and value.ndim == 0:
        value = value[()]
    if isinstance(value, bool | np.bool_) or not isinstance(value, numbers.Real | Decimal):
        return None
    try:
        return float(value)
    except (OverflowError, ValueError, TypeError, ArithmeticError):
        return math.nan  # e.g. Fraction(10**400), Decimal('sNaN'): refused as not finite


def _pair(value: Any) -> tuple[float, float] | None:
    """(lo, hi) as floats when ``value`` is a sequence (or array) of exactly two reals."""
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence | np.ndarray):
        return None
    if len(value) != 2:
        return None
    lo, hi = _real(value[0]), _real(value[1])
    return None if lo is None or hi is None else (lo, hi)


def _vector(value: Any) -> np.ndarray | None:
    """A real scalar or a non-empty sequence of reals, as a 1-d float array."""
    scalar = _real(value)
    if scalar is not None:
        return np.array([scalar])
    if isinstance(value, str | bytes | Mapping) or not isinstance(value, Sequence | np.ndarray):
        return None
    items = [_real(v) for v in value]
    if not items or any(v is None for v in items):
        return None
    return np.array(items, dtype=np.float64)


def parse_bounds(bounds: Any, name: str = "bounds") -> tuple[np.ndarray, np.ndarray, bool]:
    """Read declared bounds in one of :data:`BOUNDS_FORMS`, never guessing between them.

    Returns (lower, upper, per_feature): with ``per_feature`` False, one pair (lo, hi) that
    applies to every feature (arrays of length 1). A pair of two vectors ``(lower, upper)`` is
    refused: at d = 2 it reads the same as two per-feature pairs, which is how it used to be
    silently transposed."""
    if bounds is None:
        raise InvalidParameterError(name, None, "declared: " + BOUNDS_FORMS, _BOUNDS_HINT)
    if isinstance(bounds, Mapping):
        problem = ""
        lower = upper = None
        if set(bounds) != {"lower", "upper"}:
            problem = "A mapping needs exactly the keys 'lower' and 'upper'."
        else:
            lower, upper = _vector(bounds["lower"]), _vector(bounds["upper"])
            if lower is None or upper is None:
                problem = "'lower' and 'upper' are each a number or a sequence of numbers."
            elif lower.size != upper.size and 1 not in (lower.size, upper.size):
                problem = "'lower' and 'upper' have different lengths."
        if problem or lower is None or upper is None:
            raise InvalidParameterError(
                name, short_repr(bounds), BOUNDS_FORMS, f"{problem} {_BOUNDS_HINT}"
            )
        size = max(lower.size, upper.size)
        per_feature = not (
            _real(bounds["lower"]) is not None and _real(bounds["upper"]) is not None
        )
        return np.resize(lower, size), np.resize(upper, size), per_feature
    pair = _pair(bounds)
    if pair is not None:
        return np.array([pair[0]]), np.array([pair[1]]), False
    if isinstance(bounds, np.ndarray) and bounds.ndim == 2 and bounds.shape[1] == 2:
        rows: list[tuple[float, float] | None] = [_pair(row) for row in bounds]
    elif isinstance(bounds, Sequence | np.ndarray) and not isinstance(bounds, str | bytes):
        rows = [_pair(row) for row in bounds] if len(bounds) else [None]
    else:
        rows = [None]
    if any(row is None for row in rows):
        hint = _BOUNDS_HINT
        vectors = [_vector(v) for v in bounds] if _sequence_of(bounds, 2) else []
        if len(vectors) == 2 and all(v is not None and v.size != 2 for v in vectors):
            hint = (
                "A pair of vectors (lower, upper) is not read: at d = 2 it is the same as two "
                "per-feature pairs. Write list(zip(lower, upper)) or "
                "{'lower': lower, 'upper': upper}. " + _BOUNDS_HINT
            )
        raise InvalidParameterError(name, short_repr(bounds), BOUNDS_FORMS, hint)
    array = np.array(rows, dtype=np.float64)
    return array[:, 0].copy(), array[:, 1].copy(), True


def _sequence_of(value: Any, size: int) -> bool:
    return (
        isinstance(value, Sequence | np.ndarray)
        and not isinstance(value, str | bytes)
        and len(value) == size
    )


def check_box(
    bounds: Any, name: str = "bounds", d: int | None = None, columns_of: str | None = None
) -> Box:
    """Validate declared bounds (one of :data:`BOUNDS_FORMS`) for ``d`` features.

    One pair (lo, hi) applies to every feature (d defaults to 1); per-feature pairs must number
    exactly d (else the refusal names the input ``columns_of`` if given — its columns are the
    schema — or the bounds). Every bound is finite, of magnitude at most 1e150, with lo < hi and
    a half-width (hi - lo)/2 above 0 (the row map divides by it)."""
    lower, upper, per_feature = parse_bounds(bounds, name)
    if not per_feature:
        size = 1 if d is None else d
        lower, upper = np.full(size, lower[0]), np.full(size, upper[0])
    elif d is not None and lower.size != d and columns_of is not None:
        raise InvalidDataError(
            columns_of,
            f"has {d} columns but {name} declares {lower.size} (lo, hi) pairs",
            "Declare one (lo, hi) pair per feature.",
        )
    elif d is not None and lower.size != d:
        raise InvalidParameterError(
            name,
            short_repr(bounds),
            f"one (lo, hi) pair per feature: {d} pairs for {d} features, not {lower.size}",
            _BOUNDS_HINT,
        )
    shown = short_repr(bounds)
    if not (np.all(np.isfinite(lower)) and np.all(np.isfinite(upper))):
        raise InvalidParameterError(name, shown, "finite numbers (no NaN or ±inf)", _BOUNDS_HINT)
    if not np.all(lower < upper):
        j = int(np.flatnonzero(~(lower < upper))[0])
        raise InvalidParameterError(
            name,
            shown,
            f"lo < hi for every feature (feature {j}: lo = {float(lower[j])!r}, "
            f"hi = {float(upper[j])!r})",
            "Each pair is (lo, hi) of one feature, e.g. bounds=[(0, 18), (-5, 65)] for two "
            "features; a pair of vectors (lower, upper) is not read that way (it was ambiguous "
            "at d = 2): write {'lower': lower, 'upper': upper}.",
        )
    if float(np.max(np.abs(np.concatenate([lower, upper])))) > 1e150:
        raise InvalidParameterError(name, shown, "of magnitude at most 1e150", _BOUNDS_HINT)
    if not np.all((upper - lower) / 2 > 0):  # the row map divides by the half-width
        raise InvalidParameterError(
            name, shown, "lo < hi with a half-width (hi - lo)/2 above 0", _BOUNDS_HINT
        )
    return Box(lower.copy(), upper.copy())


def input_shape(X: Any, name: str = "X") -> tuple[int, ...]:
    """The public schema of an in-memory input, checked before anything is reserved: its shape
    and, where the input declares them (numpy arrays, pandas frames and series), its dtypes,
    which must be numeric or boolean. Values are not read (a Python list has no declared dtype:
    its values are read one by one after the reservation, by :func:`check_shape`, and never
    refused). A scipy sparse matrix is refused: it declares no dense shape numpy can read."""
    if sp.issparse(X):
        raise InvalidDataError(
            name, "is a scipy sparse matrix", "Pass a dense 2-d array, e.g. X.toarray()."
        )
    try:
        shape = tuple(int(s) for s in np.shape(X))
    except (TypeError, ValueError):
        raise InvalidDataError(
            name, "cannot be read as an array of rows of equal length", "Pass a 2-d numeric array."
        ) from None
    declared: list[Any] = []
    dtypes = getattr(X, "dtypes", None)
    if dtypes is not None and not isinstance(X, np.ndarray) and hasattr(dtypes, "__iter__"):
        declared = list(dtypes)
    elif getattr(X, "dtype", None) is not None:
        declared = [X.dtype]
    for dtype in declared:
        if getattr(dtype, "kind", None) not in tuple("biuf"):
            raise InvalidDataError(name, f"expected numbers, got dtype {dtype}")
    return shape


def input_features(shape: tuple[int, ...], name: str = "X") -> int | None:
    """The number of features an input of this shape has (1 for a 1-d input), or None when the
    shape is not 1-d or 2-d (:func:`check_columns` then refuses it). A 2-d input without
    columns is refused."""
    if len(shape) == 2 and shape[1] < 1:
        raise InvalidDataError(name, "has no columns: expected at least one feature")
    return int(shape[1]) if len(shape) == 2 else 1 if len(shape) == 1 else None


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
    """The schema check (public): a numeric 2-d array with d columns; any number of rows.
    pandas frames and series are read as float64 (nullable columns' missing values become NaN,
    which the row map sends to the midpoint). A container without a declared dtype (a Python
    list) is read value by value (:func:`dpkit._arrays.as_float64`): ``None``, text or anything
    else that is not a number becomes NaN, so one person's value never makes the fit fail."""
    try:
        if hasattr(X, "to_numpy") and not isinstance(X, np.ndarray):
            array = np.asarray(X.to_numpy(dtype=np.float64, na_value=np.nan))
        elif isinstance(X, np.ndarray):
            array = X
        else:
            array = as_float64(np.asarray(X, dtype=object))
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


def charged(
    loss: PrivacyLoss,
    ledger: Any,
    dataset: str | None,
    analyst: str | None,
    accountant: Any,
    what: str,
    body: Callable[[], T],
) -> T:
    """Run ``body`` (which reads the data) through the door, charging ``loss`` to the ledger or
    accountant given (:func:`dpkit._door.release`), or just run it when neither is given.

    Give either ``ledger`` with ``dataset`` (and optionally ``analyst``), or an
    :class:`~dpkit.accounting.Accountant`. The budget must already exist. If the body raises,
    the reservation is marked failed (the charge stays: no refunds) and the error is reported
    as what it is (:func:`dpkit._door.failed_after_reservation`).
    """
    from dpkit._door import Books, release
    from dpkit.accounting import Accountant
    from dpkit.ledger import Ledger

    books: Books | None = None
    if accountant is not None:
        if not isinstance(accountant, Accountant):
            raise InvalidParameterError("accountant", accountant, "a dpkit Accountant or None")
        if ledger is not None:
            raise InvalidParameterError("ledger", ledger, "None when accountant is given")
        books = accountant.books
    elif ledger is not None:
        if not isinstance(ledger, Ledger):
            raise InvalidParameterError("ledger", ledger, "a dpkit.ledger.Ledger or None")
        if dataset is None:
            raise InvalidParameterError(
                "dataset", dataset, "the dataset's name in the ledger when ledger is given"
            )
        books = Books(ledger, dataset, analyst)
    elif dataset is not None:
        raise InvalidParameterError("ledger", ledger, "given when dataset is given")
    if books is None:
        return body()
    value, _ = release(books, loss, lambda stage: body(), query=what, mechanism=what)
    return value


def int_seed() -> int:
    """A seed for post-processing helpers (k-means++ on a private coreset), from dpkit.noise."""
    from dpkit.noise import generator

    return int(generator(1).integers(0, 2**31 - 1))
