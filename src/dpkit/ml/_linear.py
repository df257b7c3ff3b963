"""Private linear regression from noisy sufficient statistics, with AdaSSP's private ridge.

Guarantee: ``LinearRegression(epsilon=ε)`` is ε-DP and ``LinearRegression(rho=ρ)`` is ρ-zCDP
for datasets that differ by adding or removing one row; ``privacy_loss_`` is the exact loss.

Reason. Rows go through the public row map (:mod:`dpkit.ml._common`): x to [-1, 1]^d, y to
[-1, 1], from the declared ``bounds_X`` / ``bounds_y`` (NaN → midpoint, clamp). With
z = (x, 1) (p = d + 1 coordinates, or p = d without intercept), one row adds

* zzᵀ to A = ZᵀZ: the upper triangle (p(p+1)/2 entries, each z_i·z_j in [-1, 1]) moves by at
  most (p² + p)/2 in L1 and √((p² + p)/2) in L2 (rounded up exactly; below ||zzᵀ||_F = p);
* z·y to b = Zᵀy: at most p in L1 and √p in L2;
* y² <= 1 to c = yᵀy.

Each is released once with Laplace (ε) or Gaussian (ρ) noise on the exact grid, at a share of the
budget (sequential composition: shares add up to the total). Everything else — the ridge λ, the
solve, the confidence intervals — is post-processing of those three releases. Sums are exact:
features are rounded to a fixed-point grid of 2^-12 and summed in int64; the products are
multiples of 2^-24, so the sums are exact float64 values for up to 5·10^8 rows.

Methods:

* ``"sufficient_statistics"`` (Vu & Slavkovic 2009; Foulds et al. 2016; Wang 2018 "SSP"):
  θ = Ã⁻¹ b̃ (a least-squares solve, so a singular or indefinite Ã never raises).
* ``"adassp"`` (Wang 2018, "Revisiting differentially private linear regression", Alg. 2):
  θ = (Ã + λI)⁻¹ b̃ with λ = max(0, η - λ_min(Ã)), where η is a high-probability bound on the
  spectral norm of Ã's noise. Wang releases λ_min(XᵀX) separately with a third of the budget;
  here it is read from the released Ã (post-processing), which is at most η off, so the
  budget is split between two releases and λ still keeps Ã + λI well conditioned.

Confidence intervals (``coef_ci_``, only with an intercept, where Ã's corner is a noisy row
count) target the least-squares coefficient of the **clamped** data (rows after the public row
map: NaN to the midpoint, values clamped into the declared bounds) — under a linear model on
the clamped data, its population coefficient too (the sampling variance is included). They are
not about the unclamped data: a bound that cuts the data changes the target. Each is a normal
approximation whose variance adds the sampling variance σ̂²·M⁻¹ÃM⁻¹ (σ̂² from the released c,
b̃, Ã) and the first-order variance of the privacy noise (σ_b² + σ_A²||θ||²)·M⁻², M = Ã + λI.
AdaSSP's ridge biases θ by -λM⁻¹θ*; undoing it exactly gives the unregularised Ã⁻¹b̃, so when
λ > 0 the interval is the hull of the ridge estimate's interval and the unregularised
estimate's (M = Ã). With loose bounds (10× the data's range) this raised the coverage of the
OLS coefficient from 1 in 20 to 19 in 20 (tests/statistical/test_ml_interval_coverage.py). When
Ã is not positive definite the bias cannot be bounded from the released values: ``coef_ci_`` is
(-inf, inf) and an :class:`UnboundedIntervalWarning` says so. All of it is post-processing.
"""

from __future__ import annotations

import math
import warnings
from fractions import Fraction
from typing import Any

import numpy as np
from scipy.stats import norm
from sklearn.base import BaseEstimator, RegressorMixin

from dpkit._exact import sqrt_upper
from dpkit.errors import InvalidDataError, InvalidParameterError
from dpkit.ml._common import (
    Box,
    Budget,
    charged,
    check_box,
    check_budget,
    check_columns,
    check_shape,
    input_features,
    input_shape,
    map_rows,
    short_repr,
)

__all__ = ["LinearRegression"]

_BITS = 12
_METHODS = ("adassp", "sufficient_statistics")
_SHARES = (Fraction(9, 20), Fraction(9, 20), Fraction(1, 10))  # A, b, c
_MAX_RATIO = 1e200
_MAX_FEATURES = 1000


def _gram(fixed_z: np.ndarray, fixed_y: np.ndarray) -> tuple[np.ndarray, np.ndarray, float]:
    """Exact ZᵀZ, Zᵀy, yᵀy of fixed-point rows, in blocks of int64 (no overflow), as floats."""
    p = fixed_z.shape[1]
    unit2 = float(2 ** (2 * _BITS))
    a = np.zeros((p, p), dtype=object)
    b = np.zeros(p, dtype=object)
    c = 0
    block = 1 << 18
    for start in range(0, fixed_z.shape[0], block):
        zb = fixed_z[start : start + block]
        yb = fixed_y[start : start + block]
        a = a + (zb.T @ zb).astype(object)
        b = b + (zb.T @ yb).astype(object)
        c += int(yb @ yb)
    return a.astype(np.float64) / unit2, b.astype(np.float64) / unit2, float(c) / unit2


class UnboundedIntervalWarning(UserWarning):
    """``coef_ci_`` is (-inf, inf): the released XᵀX cannot bound the ridge's bias."""


def _noise_sd(
    a_noisy: np.ndarray,
    b_noisy: np.ndarray,
    c_noisy: float,
    m: np.ndarray,
    theta: np.ndarray,
    sigma_a: float,
    sigma_b: float,
) -> np.ndarray:
    """Standard deviations of θ = M⁻¹b̃ (scaled units), to first order: the sampling variance
    σ̂²·M⁻¹ÃM⁻¹ (σ̂² from the released c̃, b̃, Ã and the noisy row count in Ã's corner) plus
    the privacy noise's (σ_b² + σ_A²‖θ‖²)·M⁻². Post-processing of released values only."""
    p = a_noisy.shape[0]
    n_hat = max(float(a_noisy[-1, -1]), float(p + 1))
    with np.errstate(all="ignore"):
        rss = c_noisy - 2.0 * float(theta @ b_noisy) + float(theta @ a_noisy @ theta)
        s2 = max(rss, 0.0) / max(n_hat - p, 1.0)
        m_inv = np.linalg.pinv(m)
        cov = s2 * np.abs(m_inv @ a_noisy @ m_inv) + (
            sigma_b**2 + sigma_a**2 * float(theta @ theta)
        ) * (m_inv @ m_inv)
        return np.asarray(np.sqrt(np.abs(np.diag(cov))))


class LinearRegression(BaseEstimator, RegressorMixin):  # type: ignore[misc]
    """Differentially private linear regression with declared bounds.

    Args:
        epsilon: total ε (pure DP; Laplace noise), or give ``rho`` (zCDP; Gaussian noise).
        rho: total ρ.
        bounds_X: declared bounds of the features (public, never read from the data): one
            pair per feature ``[(lo_1, hi_1), ..., (lo_d, hi_d)]``, one pair ``(lo, hi)`` for
            every feature, or ``{"lower": [...], "upper": [...]}``. A pair of vectors
            ``(lower, upper)`` is refused (at d = 2 it reads as two per-feature pairs).
        bounds_y: ``(lo, hi)`` for the target; public.
        method: "adassp" (default) or "sufficient_statistics".
        fit_intercept: fit an intercept (default True).
        confidence: level of ``coef_ci_`` (default 0.95).
        failure_probability: β in AdaSSP's noise bound η (utility only; default 0.05).

    Attributes (after ``fit``):
        coef_, intercept_: the private model in original units.
        coef_ci_: (d, 2) approximate confidence intervals for the least-squares coefficients of
            the clamped data, including AdaSSP's ridge bias (see the module docstring); None
            without an intercept, (-inf, inf) with an :class:`UnboundedIntervalWarning` when
            the noisy XᵀX is not positive definite.
        ridge_: the λ used (in the scaled coordinates).
        privacy_loss_: the exact loss.
    """

    def __init__(
        self,
        *,
        epsilon: Any = None,
        rho: Any = None,
        bounds_X: Any = None,
        bounds_y: Any = None,
        method: str = "adassp",
        fit_intercept: bool = True,
        confidence: float = 0.95,
        failure_probability: float = 0.05,
    ) -> None:
        self.epsilon = epsilon
        self.rho = rho
        self.bounds_X = bounds_X
        self.bounds_y = bounds_y
        self.method = method
        self.fit_intercept = fit_intercept
        self.confidence = confidence
        self.failure_probability = failure_probability

    def _validate(self, d: int | None, columns_of: str | None = None) -> tuple[Budget, Box, Box]:
        """Every parameter, from public information only (``d``: the number of features, from
        the input's shape or the feature names), before anything is reserved."""
        if self.method not in _METHODS:
            raise InvalidParameterError("method", self.method, "one of " + ", ".join(_METHODS))
        if not isinstance(self.fit_intercept, bool):
            raise InvalidParameterError("fit_intercept", self.fit_intercept, "True or False")
        for name, value in (
            ("confidence", self.confidence),
            ("failure_probability", self.failure_probability),
        ):
            if isinstance(value, bool) or not isinstance(value, float | int) or not 0 < value < 1:
                raise InvalidParameterError(name, value, "a number in (0, 1)")
            if not 1e-12 <= value <= 1 - 1e-12:
                raise InvalidParameterError(name, value, "in [1e-12, 1 - 1e-12]")
        budget = check_budget(self.epsilon, self.rho)
        budget.check_share(budget.total * min(_SHARES), "the release of yᵀy")
        box_x = check_box(self.bounds_X, "bounds_X", d=d, columns_of=columns_of)
        box_y = check_box(self.bounds_y, "bounds_y", d=1)
        if box_x.d > _MAX_FEATURES:
            if columns_of is not None:
                raise InvalidDataError(
                    columns_of, f"has {box_x.d} features; at most {_MAX_FEATURES} are supported"
                )
            raise InvalidParameterError(
                "bounds_X", f"{box_x.d} pairs", f"for at most {_MAX_FEATURES} features"
            )
        if not self.fit_intercept:  # scale by the largest magnitude, without shifting
            mag = np.maximum(np.abs(box_x.lower), np.abs(box_x.upper))
            box_x = Box(-mag, mag)
            mag_y = np.maximum(np.abs(box_y.lower), np.abs(box_y.upper))
            box_y = Box(-mag_y, mag_y)
        # the model is unscaled by half_y / half_x and shifted by mid_x / half_x: refuse
        # bounds for which those overflow (they would release ±inf coefficients)
        ratios = np.concatenate([box_y.half / box_x.half, np.abs(box_x.mid) / box_x.half])
        if not np.all(ratios <= _MAX_RATIO):
            raise InvalidParameterError(
                "bounds_X",
                short_repr(self.bounds_X),
                f"wide enough against bounds_y and their own midpoints (half-width ratios "
                f"(hi_y - lo_y)/(hi_x - lo_x) and |midpoint|/half-width at most {_MAX_RATIO:g})",
                "Coefficients in original units would overflow to ±inf.",
            )
        return budget, box_x, box_y

    def fit(
        self,
        X: Any,
        y: Any,
        *,
        ledger: Any = None,
        dataset: str | None = None,
        analyst: str | None = None,
        accountant: Any = None,
    ) -> LinearRegression:
        """Fit privately; with a ledger (or accountant) the loss is reserved before reading.

        Everything public is checked first: the parameters, the bounds against X's columns,
        the declared dtypes of X and y (numpy arrays, pandas frames), and that X and y have
        the same number of rows. A Python list has no declared dtype: its values are read one
        by one and a non-number becomes NaN (the midpoint), so no value makes the fit fail."""
        shape = input_shape(X)
        d_x = input_features(shape)
        budget, box_x, box_y = self._validate(d_x, columns_of="X")
        d = box_x.d
        check_columns(shape, d)
        y_shape = input_shape(y, "y")
        if len(y_shape) not in (1, 2) or (len(y_shape) == 2 and y_shape[1] != 1):
            raise InvalidDataError("y", f"expected one target column, got shape {y_shape}")
        if y_shape[0] != shape[0]:
            raise InvalidDataError("y", "has a different number of rows than X")
        intercept = self.fit_intercept
        p = d + 1 if intercept else d
        loss = budget.loss()
        iu = np.triu_indices(p)
        pf = Fraction(p)
        share_a, share_b, share_c = (budget.total * s for s in _SHARES)
        l1_a, l2_a = (pf * pf + pf) / 2, sqrt_upper((pf * pf + pf) / 2)
        l1_b, l2_b = pf, sqrt_upper(pf)

        def measure() -> tuple[np.ndarray, np.ndarray, float]:
            array = check_shape(X, d)
            target = check_shape(y, 1, "y").reshape(-1, 1)
            if target.shape[0] != array.shape[0]:
                raise InvalidDataError("y", "has a different number of rows than X")
            fx, _ = map_rows(array, box_x, _BITS)
            fy, _ = map_rows(target, box_y, _BITS)
            fz = np.hstack([fx, np.full((fx.shape[0], 1), 2**_BITS, np.int64)]) if intercept else fx
            a, b, c = _gram(fz, fy[:, 0])
            upper = budget.noisy_vector(a[iu], share_a, l1_a, l2_a, p * (p + 1) // 2)
            b_noisy = budget.noisy_vector(b, share_b, l1_b, l2_b, p)
            c_noisy = float(
                budget.noisy_vector(np.array([c]), share_c, Fraction(1), Fraction(1), 1)[0]
            )
            return upper, b_noisy, c_noisy

        upper, b_noisy, c_noisy = charged(
            loss, ledger, dataset, analyst, accountant, f"LinearRegression({self.method})", measure
        )
        # ---- post-processing only from here
        a_noisy = np.zeros((p, p))
        a_noisy[iu] = upper
        a_noisy = a_noisy + np.triu(a_noisy, 1).T
        sigma_a = budget.noise_std(share_a, l1_a, l2_a)
        sigma_b = budget.noise_std(share_b, l1_b, l2_b)
        laplace_tail = float(l1_a / share_a) if budget.kind == "pure" else 0.0
        self._finish(
            a_noisy, b_noisy, c_noisy, sigma_a, sigma_b, laplace_tail, box_x, box_y, intercept
        )
        self.privacy_loss_ = loss
        return self

    def _finish(
        self,
        a_noisy: np.ndarray,
        b_noisy: np.ndarray,
        c_noisy: float,
        sigma_a: float,
        sigma_b: float,
        laplace_tail: float,
        box_x: Box,
        box_y: Box,
        intercept: bool,
    ) -> None:
        """Post-processing of the released (Ã, b̃, c̃): ridge, solve, unscale, intervals.
        Never raises (it runs after the charge): non-finite inputs are zeroed first."""
        a_noisy = np.nan_to_num(np.asarray(a_noisy, dtype=np.float64), posinf=0.0, neginf=0.0)
        b_noisy = np.nan_to_num(np.asarray(b_noisy, dtype=np.float64), posinf=0.0, neginf=0.0)
        c_noisy = float(np.nan_to_num(c_noisy, posinf=0.0, neginf=0.0))
        sigma_a, sigma_b = (float(np.nan_to_num(s, nan=0.0)) for s in (sigma_a, sigma_b))
        p = a_noisy.shape[0]
        d = box_x.d
        beta = float(self.failure_probability)
        eta = sigma_a * (2.0 * math.sqrt(p) + math.sqrt(2.0 * math.log(p * (p + 1) / beta)))
        eta += laplace_tail * math.log(p * (p + 1) / beta)  # heavier Laplace tails
        lam_min = float(np.linalg.eigvalsh(a_noisy)[0])
        ridge = max(0.0, eta - lam_min) if self.method == "adassp" else 0.0
        m = a_noisy + ridge * np.eye(p)
        theta = np.linalg.lstsq(m, b_noisy, rcond=None)[0]
        scale_y = float(box_y.half[0])
        coef = scale_y * theta[:d] / box_x.half
        if intercept:
            shift = np.sum(theta[:d] * box_x.mid / box_x.half)
            inter = float(box_y.mid[0] + scale_y * (theta[d] - shift))
        else:
            inter = 0.0
        self.coef_ = coef
        self.intercept_ = inter
        self.ridge_ = ridge
        self.n_features_in_ = d
        self.coef_ci_ = None
        if not intercept:
            return
        z = float(norm.ppf(0.5 + float(self.confidence) / 2))
        unscale = scale_y / box_x.half
        # the normal interval around the (ridge) estimate: sampling + privacy noise, no bias
        half = z * _noise_sd(a_noisy, b_noisy, c_noisy, m, theta, sigma_a, sigma_b)[:d] * unscale
        low, high = coef - half, coef + half
        if ridge > 0 or lam_min <= 0:
            # The ridge shrinks θ by λ(Ã + λI)⁻¹θ*. Undoing it exactly (θ̂ + λM⁻¹θ, solved for
            # θ) gives the unregularised Ã⁻¹b̃, so the interval is the hull of the ridge's and
            # the unregularised estimate's normal intervals. When Ã is not positive definite
            # the unregularised estimate does not exist and nothing bounds the bias.
            try:
                unbiased = np.linalg.solve(a_noisy, b_noisy) if lam_min > 0 else None
            except np.linalg.LinAlgError:
                unbiased = None
            if unbiased is not None:
                sd = _noise_sd(a_noisy, b_noisy, c_noisy, a_noisy, unbiased, sigma_a, sigma_b)
                centre = scale_y * unbiased[:d] / box_x.half
                low = np.minimum(low, centre - z * sd[:d] * unscale)
                high = np.maximum(high, centre + z * sd[:d] * unscale)
            else:
                low, high = np.full(d, -np.inf), np.full(d, np.inf)
        if not (np.all(np.isfinite(low)) and np.all(np.isfinite(high))):
            low, high = np.full(d, -np.inf), np.full(d, np.inf)
            warnings.warn(
                "LinearRegression: coef_ci_ is unbounded. The noisy XᵀX is not positive "
                "definite at this budget, so the ridge's bias cannot be bounded and no finite "
                "interval is honest. Declare tighter bounds_X (closer to the data's range), "
                "spend more budget, or fit on more rows.",
                UnboundedIntervalWarning,
                stacklevel=3,
            )
        self.coef_ci_ = np.stack([low, high], axis=1)

    def predict(self, X: Any) -> np.ndarray:
        if not hasattr(self, "coef_"):
            from sklearn.exceptions import NotFittedError

            raise NotFittedError("LinearRegression is not fitted yet: call fit first.")
        array = np.asarray(check_shape(X, self.n_features_in_), dtype=np.float64)
        return np.asarray(array @ self.coef_ + self.intercept_)
