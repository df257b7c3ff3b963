"""Private selection: the exponential mechanism, report-noisy-max and permute-and-flip.

Each mechanism takes a vector of utilities u (one score per candidate, computed from the data) and
releases the index of one candidate, favouring high scores:

* :func:`make_exponential` – the exponential mechanism (McSherry & Talwar 2007):
  P(r) ∝ exp(ε·u_r/(2Δu)).
* :func:`make_report_noisy_max` – add i.i.d. noise to every score, release the argmax. With Gumbel
  noise its output distribution *is* the exponential mechanism's (the Gumbel-max trick; Dwork &
  Roth 2014, §3.4); with exponential noise it *is* permute-and-flip (Ding, Kifer et al. 2021, "The
  permute-and-flip mechanism is identical to report-noisy-max with exponential noise"). dpkit
  samples those exact distributions instead of adding floating-point noise.
* :func:`make_permute_and_flip` – permute-and-flip (McKenna & Sheldon 2020): visit the candidates
  in a uniformly random order, flip a coin with heads probability exp(ε(u_r - u*)/(2Δu)), release
  the first head. Never worse than the exponential mechanism in expected utility.

Neighbouring relation: utility vectors u, u' of the same length with max_r |u_r - u'_r| <= Δu, the
*utility sensitivity*. The input metric is :class:`~dpkit.core._spaces.AbsoluteDistance` applied
to every coordinate, so ``d_in`` bounds each coordinate's change (an L∞ distance). The privacy map
is PureDP(ε·d_in/Δu): exactly ε at the calibrated ``d_in = Δu``.

With ``monotonic=True`` the factor 2 is dropped (coefficient ε/Δu). This is ε-DP only if the
utility is *monotone*: for every pair of neighbours, either u'_r >= u_r for all r or u'_r <= u_r
for all r (e.g. counts, when neighbours add or remove one person). It is the caller's promise; for
a non-monotone utility the true loss can reach 2ε.

Exactness: every sampler draws its *exact* target distribution for the exact binary values of the
float utilities, by rejection with exact Bernoulli(e^{-γ}) draws (rational γ, see
:func:`dpkit.noise.bernoulli_exp_vector`); docs/selection.md has the proofs.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from fractions import Fraction
from typing import Any, Literal

import numpy as np

from dpkit._arrays import as_float64
from dpkit._exact import Number, check_alpha, check_epsilon, sensitivity_of
from dpkit.core._framework import Measurement
from dpkit.core._losses import PrivacyLoss, PureDP
from dpkit.core._spaces import AbsoluteDistance, AtomDomain, VectorDomain
from dpkit.errors import InvalidDataError, InvalidParameterError
from dpkit.mechanisms._info import SelectionInfo
from dpkit.noise import bernoulli_exp, bernoulli_exp_vector, generator, uniform_integers

__all__ = [
    "exponential_utility_bound",
    "make_exponential",
    "make_permute_and_flip",
    "make_report_noisy_max",
]

_MAX_DRAWS_PER_ROUND = 1 << 20
_MAX_EXACT_INT = 2**53
# Bernoulli(e^{-γ}) with γ above _DIRECT_LIMIT is drawn as Bernoulli(e^{-_SPLIT}) AND
# Bernoulli(e^{-(γ - _SPLIT)}), so the float thresholds of the sampler never underflow.
_DIRECT_LIMIT = 512.0
_SPLIT = Fraction(256)
# Relative error bound used for γ = c·(u_max - u_r) computed in float64: three roundings of at
# most 2^-53 each (c, the subtraction, the product) give < 2^-51; 2^-40 is generous.
_GAMMA_REL_ERROR = 2.0**-40
_PMF_CHUNK = 1 << 22


# ----------------------------------------------------------------------------- exact helpers
def _accept(
    gamma_float: np.ndarray,
    margin: np.ndarray,
    gamma_exact: Callable[[int], Fraction],
) -> np.ndarray:
    """Independent Bernoulli(e^{-γ_i}) draws, exactly.

    ``gamma_float[i]`` approximates the rational γ_i >= 0 within ``margin[i]`` (or is inf when
    γ_i is astronomically large); ``gamma_exact(i)`` returns γ_i exactly and is called only for
    the rare draws the float comparison cannot decide. For γ_i > 512 the draw is split into
    Bernoulli(e^{-256}) AND Bernoulli(e^{-(γ_i - 256)}), so no float threshold underflows (the
    second factor is reached with probability ~1e-111).
    """
    out = np.zeros(gamma_float.shape, dtype=bool)
    direct = gamma_float <= _DIRECT_LIMIT  # False for inf
    near = np.flatnonzero(direct)
    if near.size:

        def exact_near(i: int) -> Fraction:
            return gamma_exact(int(near[i]))

        out[near] = bernoulli_exp_vector(gamma_float[near], exact_near, margin[near])
    far = np.flatnonzero(~direct)
    if far.size:
        # Here γ >= 512·(1 - 2^-40) > 256: e^{-γ} = e^{-256}·e^{-(γ-256)}, two independent
        # coins that must both come up heads. The second is only flipped after the first.
        first = np.asarray(bernoulli_exp(_SPLIT, far.size), dtype=bool)
        alive = far[first]
        if alive.size:
            split = float(_SPLIT)
            rest = gamma_float[alive] - split
            # the subtraction and float(_SPLIT) each round by at most 2^-53 relative
            rest_margin = margin[alive] + (np.abs(rest) + split) * 2.0**-52

            def exact_rest(i: int) -> Fraction:
                return gamma_exact(int(alive[i])) - _SPLIT

            out[alive] = _accept(rest, rest_margin, exact_rest)
    return out


class _Gaps:
    """γ_{row, r} = c·(max(u_row) - u_{row, r}) in float64 with an error bound, and exactly."""

    def __init__(self, utilities: np.ndarray, coefficient: Fraction) -> None:
        self.utilities = utilities
        self.coefficient = coefficient
        self.top = utilities.max(axis=1)
        with np.errstate(over="ignore"):
            self.gamma = float(coefficient) * (self.top[:, None] - utilities)
        self.margin = self.gamma * _GAMMA_REL_ERROR

    def exact(self, row: int, column: int) -> Fraction:
        top = Fraction(float(self.top[row]))
        return self.coefficient * (top - Fraction(float(self.utilities[row, column])))

    def accept(self, rows: np.ndarray, columns: np.ndarray) -> np.ndarray:
        """Bernoulli(e^{-γ_{rows[i], columns[i]}}) for flat index arrays, exactly."""

        def exact(i: int) -> Fraction:
            return self.exact(int(rows[i]), int(columns[i]))

        return _accept(self.gamma[rows, columns], self.margin[rows, columns], exact)


# ----------------------------------------------------------------------------- samplers
def _sample_exponential(gaps: _Gaps) -> np.ndarray:
    """One index per row with P(r) ∝ e^{-γ_r} = e^{c·u_r}/e^{c·u_max}, exactly.

    Rejection: propose r uniformly, accept with probability e^{-γ_r} <= 1, repeat. An accepted
    proposal is r with probability (1/k)e^{-γ_r} / Σ_s (1/k)e^{-γ_s}, the target. The top
    candidate is always accepted, so each proposal succeeds with probability >= 1/k. Proposals
    come in vectorised batches; each row releases the first accepted proposal of its own i.i.d.
    sequence, so batching does not change the distribution.
    """
    rows_total, k = gaps.utilities.shape
    out = np.empty(rows_total, dtype=np.int64)
    with np.errstate(under="ignore"):
        acceptance = np.exp(-np.minimum(gaps.gamma, 700.0)).mean(axis=1)  # only for batch sizes
    pending = np.arange(rows_total)
    while pending.size:
        rows = pending.size
        per_row = math.ceil(3.0 / float(acceptance[pending].min()))
        batch = max(1, min(per_row, _MAX_DRAWS_PER_ROUND // rows))
        proposals = np.asarray(uniform_integers(k, rows * batch), dtype=np.int64)
        row_index = np.repeat(pending, batch)
        accepted = gaps.accept(row_index, proposals).reshape(rows, batch)
        proposals = proposals.reshape(rows, batch)
        done = accepted.any(axis=1)
        first = accepted.argmax(axis=1)
        out[pending[done]] = proposals[done, first[done]]
        pending = pending[~done]
    return out


def _sample_permute_and_flip(gaps: _Gaps) -> np.ndarray:
    """One index per row by permute-and-flip, exactly.

    Each row's candidates are visited in a uniformly random order (numpy's Fisher-Yates shuffle
    with unbiased bounded integers, from the secure generator); candidate r is released with
    probability e^{-γ_r} (an exact Bernoulli draw) and otherwise the next one is visited. The top
    candidate has γ = 0, so the walk always stops. Coins are flipped in growing blocks of the
    permutation; coins after a row's first head are never looked at.
    """
    rows_total, k = gaps.utilities.shape
    order = np.broadcast_to(np.arange(k, dtype=np.int64), (rows_total, k))
    order = generator(rows_total * k).permuted(order, axis=1)
    out = np.empty(rows_total, dtype=np.int64)
    pending = np.arange(rows_total)
    position, block = 0, 4
    while pending.size:
        if position >= k:  # impossible: the top candidate's coin is always heads
            raise RuntimeError("permute-and-flip visited every candidate without a head")
        width = min(block, k - position)
        columns = order[pending, position : position + width]
        row_index = np.repeat(pending, width)
        heads = gaps.accept(row_index, columns.reshape(-1)).reshape(pending.size, width)
        done = heads.any(axis=1)
        first = heads.argmax(axis=1)
        out[pending[done]] = columns[done, first[done]]
        pending = pending[~done]
        position += width
        block *= 2
    return out


# ----------------------------------------------------------------------------- pmfs
def _single_vector(utility: Any) -> np.ndarray:
    utilities, one_d = _utility_matrix(utility)
    if not one_d:
        raise InvalidDataError("utilities", "output_pmf takes one 1-d utility vector")
    return utilities[0]


def _exponential_pmf(utility: np.ndarray, coefficient: Fraction) -> np.ndarray:
    """P(r) = e^{c(u_r - u_max)} / Σ_s e^{c(u_s - u_max)}, in float64."""
    with np.errstate(over="ignore", under="ignore"):
        weights = np.exp(-float(coefficient) * (utility.max() - utility))
    return np.asarray(weights / weights.sum(), dtype=np.float64)


def _permute_and_flip_pmf(utility: np.ndarray, coefficient: Fraction) -> np.ndarray:
    """P(r) = p_r ∫₀¹ Π_{j≠r} (1 - p_j t) dt with p_j = e^{c(u_j - u_max)}.

    Visiting the candidates in a uniformly random order is the same as giving each candidate an
    independent uniform arrival time T_j and visiting them by increasing T_j. Given T_r = t, each
    other candidate j comes before r independently with probability t and then shows tails with
    probability 1 - p_j; so P(r) = p_r ∫₀¹ Π_{j≠r}(1 - p_j t) dt. The integrand is a polynomial
    of degree k-1, integrated exactly (up to float rounding) by Gauss-Legendre quadrature with
    ⌊k/2⌋+1 nodes; every term is positive, so the sum is numerically stable. O(k²) time.
    """
    k = utility.size
    with np.errstate(over="ignore", under="ignore"):
        p = np.exp(-float(coefficient) * (utility.max() - utility))
    from scipy.special import roots_legendre  # imported when used: scipy takes ~0.4 s to load

    nodes, weights = roots_legendre(k // 2 + 1)
    t = (np.asarray(nodes, dtype=np.float64) + 1.0) / 2.0
    w = np.asarray(weights, dtype=np.float64) / 2.0
    logs = np.log1p(-np.outer(t, p))  # (nodes, k), finite since t < 1 and p <= 1
    total = logs.sum(axis=1)
    out = np.empty(k, dtype=np.float64)
    step = max(1, _PMF_CHUNK // max(1, t.size))
    for start in range(0, k, step):
        stop = min(k, start + step)
        others = np.exp(total[:, None] - logs[:, start:stop])  # Π_{j≠r}(1 - p_j t)
        out[start:stop] = p[start:stop] * (w @ others)
    return out


# ----------------------------------------------------------------------------- validation
def _as_array(data: Any, what: str) -> np.ndarray:
    try:
        return np.asarray(data)
    except (ValueError, TypeError) as error:  # ragged nesting and the like
        raise InvalidDataError(what, f"cannot be read as an array ({error})") from None


def _utility_matrix(data: Any) -> tuple[np.ndarray, bool]:
    """Utilities as a finite float64 (rows, k) matrix, and whether the input was one vector."""
    array = _as_array(data, "utilities")
    if array.dtype == object:  # Python ints past 2^64, None: read by the container, not refused
        array = as_float64(array)
    if array.dtype.kind not in "biuf":
        raise InvalidDataError(
            "utilities",
            f"expected numbers, got dtype {array.dtype}",
            "Pass one score per candidate (a 1-d array), or one row of scores per release.",
        )
    if array.ndim not in (1, 2):
        raise InvalidDataError(
            "utilities",
            f"expected a 1-d vector (or a 2-d array of rows), got {array.ndim}-d",
            "Pass one score per candidate.",
        )
    if array.shape[-1] == 0:
        raise InvalidDataError("utilities", "has no candidates", "Pass at least one score.")
    if array.dtype.kind in "iu" and array.size:
        largest = max(abs(int(array.min())), abs(int(array.max())))
        if largest > _MAX_EXACT_INT:
            raise InvalidDataError(
                "utilities",
                "an integer score is beyond 2^53, where float64 cannot hold it "
                "exactly (rounding could change the sensitivity)",
                "Rescale the scores (and the sensitivity) first.",
            )
    utilities = array.astype(np.float64)
    if not np.all(np.isfinite(utilities)):
        raise InvalidDataError(
            "utilities", "contains NaN or infinite values", "Every candidate needs a finite score."
        )
    one_d = utilities.ndim == 1
    return (utilities[None, :] if one_d else utilities), one_d


def _coefficient(
    epsilon: Number, sensitivity: Number, monotonic: bool
) -> tuple[Fraction, Fraction, Fraction]:
    """(ε, Δu, c) with c = ε/(2Δu), or ε/Δu for monotone utilities."""
    if not isinstance(monotonic, bool):
        raise InvalidParameterError("monotonic", monotonic, "True or False")
    eps = check_epsilon(epsilon)
    delta_u = sensitivity_of("sensitivity", sensitivity)
    if delta_u <= 0:
        raise InvalidParameterError(
            "sensitivity",
            sensitivity,
            "> 0",
            "The sensitivity bounds how much one person can change any candidate's score.",
        )
    coefficient = eps / delta_u if monotonic else eps / (2 * delta_u)
    if not 2.0**-900 < float(coefficient) < 2.0**900:
        raise InvalidParameterError(
            "epsilon / sensitivity",
            float(coefficient),
            "between 2^-900 and 2^900",
            "Rescale the utilities so that epsilon / sensitivity is a moderate number.",
        )
    return eps, delta_u, coefficient


def exponential_utility_bound(
    k: int,
    epsilon: Number,
    sensitivity: Number,
    alpha: float = 0.05,
    *,
    monotonic: bool = False,
) -> float:
    """A utility-loss bound that holds with probability >= 1 - α for every selection mechanism.

    For the exponential mechanism, report-noisy-max and permute-and-flip over k candidates,
    P[u(r) <= OPT - (2Δu/ε)(ln k + t)] <= e^{-t} (Dwork & Roth 2014, Thm. 3.11 and Cor. 3.12);
    with t = ln(1/α) the returned gap (2Δu/ε)·(ln k + ln(1/α)) is exceeded with probability at
    most α. With ``monotonic=True`` the factor 2 is dropped (the mechanisms use ε/Δu).

    Reason: each of the three puts probability at most e^{-c·g} (c = ε/(2Δu)) on any one
    candidate whose utility is g below the best (for the exponential mechanism because the
    normaliser is at least the top candidate's weight 1; for permute-and-flip because it releases
    r only if r's coin comes up heads), so a union bound over at most k such candidates gives
    k·e^{-c·g}, which is α at g = (ln k + ln(1/α))/c.

    Example:
        >>> round(exponential_utility_bound(k=10, epsilon=1, sensitivity=1, alpha=0.05), 4)
        10.5966
    """
    if isinstance(k, bool) or not isinstance(k, int | np.integer) or k < 1:
        raise InvalidParameterError("k", k, "an integer >= 1 (the number of candidates)")
    a = check_alpha(alpha)
    _, _, coefficient = _coefficient(epsilon, sensitivity, monotonic)
    return (math.log(int(k)) + math.log(1.0 / a)) / float(coefficient)


# ----------------------------------------------------------------------------- constructors
def _selection_measurement(
    *,
    name: str,
    eps: Fraction,
    delta_u: Fraction,
    coefficient: Fraction,
    monotonic: bool,
    sampler: Callable[[_Gaps], np.ndarray],
    pmf: Callable[[np.ndarray, Fraction], np.ndarray],
    noise: str | None = None,
    noise_scale: Fraction | None = None,
) -> Measurement[Any]:
    def function(data: Any) -> Any:
        utilities, one_d = _utility_matrix(data)
        if utilities.shape[0] == 0:
            return np.empty(0, dtype=np.int64)
        chosen = sampler(_Gaps(utilities, coefficient))
        return int(chosen[0]) if one_d else chosen

    def privacy_map(d_in: Fraction) -> PrivacyLoss:
        return PureDP(eps * d_in / delta_u)

    def output_pmf(utility: Any) -> np.ndarray:
        return pmf(_single_vector(utility), coefficient)

    def outputs_of(utility: Any) -> list[int]:
        return list(range(_single_vector(utility).size))

    def utility_bound(k: int, alpha: float = 0.05) -> float:
        return exponential_utility_bound(k, eps, delta_u, alpha, monotonic=monotonic)

    return Measurement(
        input_domain=VectorDomain(AtomDomain("float")),
        input_metric=AbsoluteDistance(),
        output_measure="pure",
        function=function,
        privacy_map=privacy_map,
        name=name,
        d_in=delta_u,
        info=SelectionInfo(
            epsilon=eps,
            sensitivity=delta_u,
            monotonic=monotonic,
            coefficient=coefficient,
            outputs=None,
            outputs_of=outputs_of,
            output_pmf=output_pmf,
            utility_bound=utility_bound,
            noise=noise,
            noise_scale=noise_scale,
        ),
    )


def make_exponential(
    epsilon: Number,
    sensitivity: Number,
    *,
    monotonic: bool = False,
) -> Measurement[Any]:
    """The exponential mechanism: release index r with probability ∝ exp(ε·u_r/(2Δu)).

    Guarantee:
        ε-DP for utility vectors whose every coordinate changes by at most Δu (``sensitivity``)
        between neighbours: ``d_in`` is that per-coordinate bound and the map is ε·d_in/Δu. With
        ``monotonic=True`` the probabilities are ∝ exp(ε·u_r/Δu), which is ε-DP only for
        monotone utilities (all scores move in the same direction between neighbours).

    Reason:
        McSherry & Talwar 2007 (Dwork & Roth 2014, Thm. 3.10): the numerator
        exp(c·u_r) changes by a factor at most e^{cΔu} and so does the normaliser, giving
        e^{2cΔu} = e^ε with c = ε/(2Δu). For monotone utilities numerator and normaliser move
        in the same direction, so only one factor e^{cΔu} remains and c = ε/Δu suffices.

    Accuracy:
        P[u(r) <= OPT - (2Δu/ε)(ln k + t)] <= e^{-t} (Dwork & Roth 2014, Thm. 3.11):
        :func:`exponential_utility_bound`, also as ``info.utility_bound(k, alpha)``.

    Sampling:
        Exact for the exact binary values of the float scores: propose r uniformly, accept with
        probability e^{-γ_r}, γ_r = c·(u_max - u_r) computed as an exact rational (a float
        approximation with a proven error bound decides almost every draw), repeat. At most k
        proposals are needed on average.

    Args:
        epsilon: ε > 0.
        sensitivity: Δu > 0, the largest change of any one score between neighbours.
        monotonic: True if the utility is monotone (see above); halves the noise.

    Returns:
        A Measurement taking a 1-d array of k finite scores and returning an ``int`` in
        [0, k). A 2-d array of rows releases one index per row (an int64 array): each row is a
        separate release, so m rows computed from the same data cost m·ε (sequential
        composition). ``info.output_pmf(u)`` is the exact output distribution (float64, over
        indices 0..k-1); since k depends on the input, ``info.outputs`` is None and
        ``info.outputs_of(u)`` lists the candidate indices.

    Example:
        >>> m = make_exponential(epsilon=1, sensitivity=1)
        >>> m.loss
        PureDP(epsilon=Fraction(1, 1))
        >>> m.info.output_pmf([0.0, 2.0]).round(4).tolist()  # ∝ (1, e)
        [0.2689, 0.7311]
        >>> m([0.0, 2.0]) in (0, 1)
        True
    """
    eps, delta_u, coefficient = _coefficient(epsilon, sensitivity, monotonic)
    return _selection_measurement(
        name="exponential",
        eps=eps,
        delta_u=delta_u,
        coefficient=coefficient,
        monotonic=monotonic,
        sampler=_sample_exponential,
        pmf=_exponential_pmf,
    )


def make_report_noisy_max(
    epsilon: Number,
    sensitivity: Number,
    *,
    noise: Literal["gumbel", "exponential"] = "gumbel",
    monotonic: bool = False,
) -> Measurement[Any]:
    """Report-noisy-max: the argmax of the scores plus i.i.d. noise, sampled exactly.

    Guarantee:
        ε-DP for utility vectors whose every coordinate changes by at most Δu between
        neighbours (map ε·d_in/Δu), with noise of scale 2Δu/ε (Δu/ε with ``monotonic=True``,
        ε-DP only for monotone utilities).

    Reason:
        * ``noise="gumbel"``: argmax_r (u_r/b + G_r) with i.i.d. standard Gumbel G_r is r with
          probability exactly e^{u_r/b}/Σ_s e^{u_s/b} (the Gumbel-max trick), so with b = 2Δu/ε
          this *is* the exponential mechanism (McSherry & Talwar 2007; Dwork & Roth 2014, §3.4),
          and it is sampled as such (:func:`make_exponential`).
        * ``noise="exponential"``: with i.i.d. Exponential(b) noise the argmax has exactly the
          distribution of permute-and-flip with coins e^{(u_r - u*)/b} (Ding, Kifer et al.
          2021, "The permute-and-flip mechanism is identical to report-noisy-max with
          exponential noise"), so it is sampled as such (:func:`make_permute_and_flip`) and is
          ε-DP by McKenna & Sheldon 2020.

        Sampling those distributions exactly avoids the floating-point pitfalls of adding
        continuous noise (ties and rounding in the noisy scores leak information; Mironov 2012).

    Accuracy:
        :func:`exponential_utility_bound` holds for both; exponential noise is never worse in
        expected utility (McKenna & Sheldon 2020).

    Args:
        epsilon: ε > 0.
        sensitivity: Δu > 0.
        noise: "gumbel" (the exponential mechanism) or "exponential" (permute-and-flip).
        monotonic: True if the utility is monotone.

    Returns:
        A Measurement like :func:`make_exponential`'s, with ``info.noise`` and
        ``info.noise_scale`` (the scale b of the equivalent additive noise, a fraction).

    Example:
        >>> m = make_report_noisy_max(epsilon=1, sensitivity=1, noise="exponential")
        >>> m.info.noise_scale
        Fraction(2, 1)
        >>> m.info.output_pmf([0.0, 0.0]).round(4).tolist()
        [0.5, 0.5]
    """
    if noise not in ("gumbel", "exponential"):
        raise InvalidParameterError(
            "noise",
            noise,
            "'gumbel' or 'exponential'",
            "'gumbel' gives the exponential mechanism, 'exponential' gives permute-and-flip.",
        )
    eps, delta_u, coefficient = _coefficient(epsilon, sensitivity, monotonic)
    gumbel = noise == "gumbel"
    return _selection_measurement(
        name=f"report_noisy_max_{noise}",
        eps=eps,
        delta_u=delta_u,
        coefficient=coefficient,
        monotonic=monotonic,
        sampler=_sample_exponential if gumbel else _sample_permute_and_flip,
        pmf=_exponential_pmf if gumbel else _permute_and_flip_pmf,
        noise=noise,
        noise_scale=1 / coefficient,
    )


def make_permute_and_flip(
    epsilon: Number,
    sensitivity: Number,
    *,
    monotonic: bool = False,
) -> Measurement[Any]:
    """Permute-and-flip (McKenna & Sheldon 2020): ε-DP selection, never worse than exponential.

    Visit the candidates in a uniformly random order; at candidate r flip a coin with heads
    probability exp(ε(u_r - u*)/(2Δu)) (u* = max score); release the first r that shows heads.
    The best candidate always shows heads, so the walk ends.

    Guarantee:
        ε-DP for utility vectors whose every coordinate changes by at most Δu between
        neighbours (map ε·d_in/Δu). With ``monotonic=True`` the coins are exp(ε(u_r - u*)/Δu),
        ε-DP only for monotone utilities.

    Reason:
        McKenna & Sheldon 2020. Equivalently, it is report-noisy-max with
        Exponential(2Δu/ε) noise (Ding et al. 2021), whose privacy follows like that of the
        Laplace version (Dwork & Roth 2014, Claim 3.9), which also covers the monotone case with
        scale Δu/ε.

    Accuracy:
        Expected utility at least the exponential mechanism's, for every input (McKenna &
        Sheldon 2020), up to twice as close to OPT; the tail bound
        :func:`exponential_utility_bound` holds as well.

    Sampling:
        Exact: the order is a uniform permutation from the secure generator and each coin an
        exact Bernoulli(e^{-γ_r}) with rational γ_r = c·(u* - u_r).

    Returns:
        A Measurement like :func:`make_exponential`'s. ``info.output_pmf(u)`` is computed
        from P(r) = p_r ∫₀¹ Π_{j≠r}(1 - p_j t) dt (random arrival times), by Gauss-Legendre
        quadrature that is exact for this polynomial, in O(k²) time.

    Example:
        >>> m = make_permute_and_flip(epsilon=1, sensitivity=1)
        >>> m.info.output_pmf([0.0, 2.0]).round(4).tolist()  # p = (1/e, 1)
        [0.1839, 0.8161]
    """
    eps, delta_u, coefficient = _coefficient(epsilon, sensitivity, monotonic)
    return _selection_measurement(
        name="permute_and_flip",
        eps=eps,
        delta_u=delta_u,
        coefficient=coefficient,
        monotonic=monotonic,
        sampler=_sample_permute_and_flip,
        pmf=_permute_and_flip_pmf,
    )
