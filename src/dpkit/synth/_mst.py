"""MST (McKenna, Miklau & Sheldon 2021, "Winning the NIST Contest"), on dpkit's exact parts.

Three equal thirds of a zCDP budget ρ (private-pgm's ``mechanisms/mst.py``):

1. **Measure every 1-way marginal** with discrete Gaussian noise: each of the d marginals gets
   ρ/(3d) (σ² = c²·3d/(2ρ) for a unit changing at most c rows: L2 sensitivity c per marginal).
   Values whose noisy count is below 3σ are merged into one cell per column (the domain
   compression of the reference; post-processing of the released counts).
2. **Select a maximum spanning tree** of 2-way marginals by d-1 exponential-mechanism steps
   (Kruskal with noisy choices): the score of a pair (a, b) is the L1 distance between its true
   (compressed) 2-way counts and the independent estimate from step 1 (sensitivity c); each
   step picks among the pairs joining two different components with ε = √(8·(ρ/3)/(d-1))
   (rounded down to a fraction), which is ε²/8-zCDP (the exponential mechanism is ε-bounded
   range, Cesar & Rogers 2021; Lemma in the MST paper).
3. **Measure the d-1 selected 2-way marginals**, each with ρ/(3(d-1)).

The charge is the exact composition of the planned steps (:meth:`MSTPlan.losses`); the run
executes exactly those steps, in that order. With d = 1 the whole budget measures the 1-way
marginal.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit.analytics._planner._noise import sqrt_down
from dpkit.core._losses import ZCDP, PrivacyLoss, compose
from dpkit.mechanisms import make_discrete_gaussian, make_exponential
from dpkit.synth._model import GraphicalModel, Measurement, estimate

__all__ = ["MSTPlan", "MSTRun", "compress", "pair_scores", "run_mst"]

Pair = tuple[int, int]


@dataclass(frozen=True)
class MSTPlan:
    """The public plan of one MST run: d attributes, the total ρ, rows per unit c."""

    d: int
    rho: Fraction
    contributions: int = 1

    @property
    def thirds(self) -> tuple[Fraction, Fraction, Fraction]:
        if self.d == 1:
            return self.rho, Fraction(0), Fraction(0)
        third = self.rho / 3
        return third, third, third

    @property
    def one_way_rho(self) -> Fraction:
        """ρ of each 1-way measurement."""
        return self.thirds[0] / self.d

    @property
    def select_epsilon(self) -> Fraction:
        """ε of each exponential-mechanism step (ε²/8 <= ρ/(3(d-1)))."""
        return sqrt_down(8 * self.thirds[1] / (self.d - 1))

    @property
    def two_way_rho(self) -> Fraction:
        """ρ of each selected 2-way measurement."""
        return self.thirds[2] / (self.d - 1)

    def losses(self) -> list[tuple[str, ZCDP]]:
        """Every step's zCDP loss, in the order the run takes them."""
        steps: list[tuple[str, ZCDP]] = [("measure 1-way", ZCDP(self.one_way_rho))] * self.d
        if self.d > 1:
            eps = self.select_epsilon
            steps += [("select", ZCDP(eps * eps / 8))] * (self.d - 1)
            steps += [("measure 2-way", ZCDP(self.two_way_rho))] * (self.d - 1)
        return steps

    def charge(self) -> PrivacyLoss:
        return compose(*(loss for _, loss in self.losses()))


@dataclass
class MSTRun:
    """What one run released (noisy measurements, the tree) and the steps it took."""

    measurements: list[Measurement] = field(default_factory=list)
    tree: list[Pair] = field(default_factory=list)
    supports: list[np.ndarray] = field(default_factory=list)
    steps: list[tuple[str, PrivacyLoss]] = field(default_factory=list)
    model: GraphicalModel | None = None


def _gaussian(rho: Fraction, contributions: int) -> Any:
    return make_discrete_gaussian(contributions, rho=rho)


def compress(
    noisy: np.ndarray, sigma: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(support mask, index map old -> new, values, per-cell std) of a noisy 1-way marginal
    with values below 3σ merged into one last cell (as private-pgm's ``compress_domain``)."""
    support = noisy >= 3 * sigma
    k = int(support.sum())
    mapping = np.where(support, np.cumsum(support) - 1, k)
    if support.all():
        return support, mapping, noisy.astype(np.float64), np.full(noisy.size, sigma)
    merged = int((~support).sum())
    values = np.append(noisy[support], noisy[~support].sum()).astype(np.float64)
    std = np.full(values.size, sigma)
    std[-1] = sigma * np.sqrt(merged)
    return support, mapping, values, std


def _compress_table(table: np.ndarray, maps: list[np.ndarray], sizes: list[int]) -> np.ndarray:
    out = np.zeros(sizes, dtype=np.int64)
    grids = np.meshgrid(*[m for m in maps], indexing="ij")
    np.add.at(out, tuple(g.reshape(-1) for g in grids), table.reshape(-1))
    return out


def pair_scores(tables: dict[Pair, np.ndarray], independent: GraphicalModel) -> dict[Pair, float]:
    """MST's selection scores: ||x_ab - x̂_ab||_1 for each pair, x the true 2-way counts and x̂
    the independent model's (public: from the released 1-way measurements). One unit changes
    x_ab by at most c in L1, so each score by at most c."""
    total = independent.total
    out: dict[Pair, float] = {}
    for (a, b), x in tables.items():
        xhat = np.outer(independent.marginal((a,)), independent.marginal((b,))) / total
        out[(a, b)] = float(np.abs(x - xhat).sum())
    return out


def run_mst(
    plan: MSTPlan,
    marginals: Callable[[], dict[tuple[int, ...], np.ndarray]],
    *,
    iterations: int = 1000,
    on_step: Callable[[str, PrivacyLoss], None] | None = None,
) -> MSTRun:
    """Run the plan on exact marginal counts (``marginals()``: every 1-way and 2-way table over
    the declared domain, read inside the engine). Returns the released measurements and the
    fitted model (over the compressed domain)."""
    run = MSTRun()
    steps = plan.losses()
    c = plan.contributions

    def step(index: int) -> PrivacyLoss:
        kind, loss = steps[index]
        run.steps.append((kind, loss))
        if on_step is not None:
            on_step(kind, loss)
        return loss

    tables = marginals()
    d = plan.d
    position = 0
    maps: list[np.ndarray] = []
    sizes: list[int] = []
    one_way: list[Measurement] = []
    for a in range(d):
        m = _gaussian(plan.one_way_rho, c)
        noisy = np.asarray(m(tables[(a,)]), dtype=np.float64)
        step(position)
        position += 1
        sigma = float(m.info.sigma)
        support, mapping, values, std = compress(noisy, sigma)
        run.supports.append(support)
        maps.append(mapping)
        sizes.append(int(values.size))
        one_way.append(Measurement((a,), values, std))
    run.measurements += one_way
    if d == 1:
        run.model = estimate(sizes, run.measurements, iterations=iterations)
        return run
    # selection: scores against the independent estimate from the 1-way measurements
    independent = estimate(sizes, one_way, iterations=min(iterations, 250))
    compressed = {
        (a, b): _compress_table(tables[(a, b)], [maps[a], maps[b]], [sizes[a], sizes[b]])
        for a, b in itertools.combinations(range(d), 2)
    }
    scores = pair_scores(compressed, independent)
    component = list(range(d))

    def find(v: int) -> int:
        while component[v] != v:
            component[v] = component[component[v]]
            v = component[v]
        return v

    em = make_exponential(plan.select_epsilon, c)
    for _ in range(d - 1):
        candidates = [e for e in scores if find(e[0]) != find(e[1])]
        chosen = candidates[int(em(np.array([scores[e] for e in candidates])))]
        step(position)
        position += 1
        component[find(chosen[0])] = find(chosen[1])
        run.tree.append(chosen)
    for a, b in run.tree:
        m = _gaussian(plan.two_way_rho, c)
        noisy = np.asarray(m(compressed[(a, b)].reshape(-1)), dtype=np.float64)
        step(position)
        position += 1
        run.measurements.append(
            Measurement((a, b), noisy.reshape(sizes[a], sizes[b]), np.asarray(float(m.info.sigma)))
        )
    run.model = estimate(sizes, run.measurements, iterations=iterations)
    return run
