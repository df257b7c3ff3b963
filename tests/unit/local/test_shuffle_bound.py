"""``local.shuffle_amplification`` against the statement it implements, at and around every
boundary.

Feldman, McMillan & Talwar 2021 ("Hiding among the clones", FOCS), Theorem 3.1: n shuffled
reports of ε₀-LDP randomizers are (ε, δ)-DP for every δ in [0, 1] with
ε₀ <= ln(n/(16·ln(2/δ))), where

    ε = ln(1 + (e^{ε₀} − 1)/(e^{ε₀} + 1)·(8·√(e^{ε₀}·ln(4/δ))/√n + 8·e^{ε₀}/n)).

The statement is recomputed here with mpmath at 60 digits. The old test probed ε₀ = 8 only, so a
condition loosened by +1 (ε₀ <= ln(…) + 1, or n + 1 for n) survived it. Here every (n, δ) of a
sweep is probed just inside and just outside the ε₀ boundary (relative 1e-12 and absolute 1e-3),
and every (ε₀, δ) just below and at the smallest n the theorem allows.
"""

from __future__ import annotations

from fractions import Fraction

import mpmath as mp
import pytest

from dpkit.core._losses import ApproxDP
from dpkit.local import shuffle_amplification

DELTAS = [Fraction(1, 10**3), Fraction(1, 10**6), Fraction(1, 10**9)]
NS = [100, 1_000, 12_345, 10**6, 10**9]


def _mp(x: Fraction) -> mp.mpf:
    return mp.mpf(x.numerator) / x.denominator


def theorem(eps0: Fraction, n: int, delta: Fraction) -> mp.mpf | None:
    """The FMT 2021 bound, or None when its condition fails (mpmath, 60 digits)."""
    with mp.workdps(60):
        e0, d = _mp(eps0), _mp(delta)
        ratio = n / (16 * mp.log(2 / d))
        if ratio <= 0 or e0 > mp.log(ratio):
            return None
        ee = mp.exp(e0)
        inner = (ee - 1) / (ee + 1) * (8 * mp.sqrt(ee * mp.log(4 / d)) / mp.sqrt(n) + 8 * ee / n)
        return mp.log(1 + inner)


def boundary(n: int, delta: Fraction) -> mp.mpf:
    with mp.workdps(60):
        return mp.log(n / (16 * mp.log(2 / _mp(delta))))


def check(eps0: Fraction, n: int, delta: Fraction) -> bool:
    """The code agrees with the theorem at (ε₀, n, δ); True if a bound was given."""
    got = shuffle_amplification(eps0, n, delta)
    want = theorem(eps0, n, delta)
    if want is None:
        assert got is None, (float(eps0), n, float(delta), got)
        return False
    assert isinstance(got, ApproxDP), (float(eps0), n, float(delta))
    assert got.delta == delta
    with mp.workdps(60):
        expected = min(want, _mp(eps0))
        assert expected <= _mp(got.epsilon) <= expected * (1 + mp.mpf(10) ** -30)
    return True


@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("n", NS)
def test_the_epsilon0_boundary(n: int, delta: Fraction) -> None:
    edge = boundary(n, delta)

    def fraction(v: mp.mpf) -> Fraction:
        return Fraction(mp.nstr(v, 40))

    with mp.workdps(60):
        inside = [edge * (1 - mp.mpf(10) ** -12), edge - mp.mpf("0.001")]
        outside = [edge * (1 + mp.mpf(10) ** -12), edge + mp.mpf("0.001"), edge + 1]
        sweep = [mp.mpf(x) for x in ("0.01", "0.1", "0.5", "1", "2", "4", "8", "12")]
    if edge > mp.mpf("0.002"):  # just inside the condition: a bound
        assert all(check(fraction(e), n, delta) for e in inside)
    assert not any(check(fraction(e), n, delta) for e in outside if e > 0)  # just outside: none
    for e in sweep:
        check(fraction(e), n, delta)


@pytest.mark.parametrize("delta", DELTAS)
@pytest.mark.parametrize("eps0", [Fraction(1, 10), Fraction(1), Fraction(3), Fraction(8)])
def test_the_n_boundary(eps0: Fraction, delta: Fraction) -> None:
    """The smallest n the theorem allows is ⌈16·ln(2/δ)·e^{ε₀}⌉: one fewer gets no bound."""
    with mp.workdps(60):
        smallest = int(mp.ceil(16 * mp.log(2 / _mp(delta)) * mp.exp(_mp(eps0))))
    assert not check(eps0, smallest - 1, delta)
    assert check(eps0, smallest, delta)
    assert check(eps0, smallest + 1, delta)
    assert check(eps0, 100 * smallest, delta)
