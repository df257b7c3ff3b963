"""AIM (McKenna, Mullins, Sheldon & Miklau, VLDB 2022), on dpkit's exact parts.

AIM is an adaptive "select, measure, generate" mechanism (private-pgm's ``mechanisms/aim.py``)
for a zCDP budget ρ, a workload W of marginals (default: every 3-way marginal) and at most c
rows per person:

* **Candidates** are the workload's marginals and all their non-empty subsets; each has the
  weight w_r = Σ_{s ∈ W} |r ∩ s|.
* **Initial round.** With T rounds (default 16·d), every measurement starts at
  ρ_m = 0.9·ρ/T and every selection at ρ_s = 0.1·ρ/T. All d 1-way marginals are measured with
  discrete Gaussian noise at ρ_m (σ² = c²/(2ρ_m)), and a graphical model is fitted to them.
* **Each round** selects one candidate by the exponential mechanism with ε = √(8ρ_s) (rounded
  down to a fraction; an ε-EM is ε²/8-zCDP, bounded range) and the score
  w_r·(‖x_r − x̂_r‖₁ − √(2/π)·σ·n_r) (the model's L1 error on r minus the expected error of a
  new measurement of its n_r cells; sensitivity c·max w), among the candidates that are already
  inside the model's cliques or whose addition keeps the junction tree below the size limit
  scaled by the share of the budget spent so far (``max_model_mb``, default 80 MB like the
  reference). The chosen marginal is measured at ρ_m and the model is refitted, warm-started.
  If the model's estimate of the chosen marginal moved by at most √(2/π)·σ·n_r in L1, the
  rounds were too noisy: ρ_m and ρ_s grow 4× (σ halves, ε doubles).
* **The last round** begins when what is left is below 2·(ρ_m + ρ_s): it spends exactly what is
  left (0.9 of it measuring, 0.1 selecting, less the rounding of ε down).

**Accounting.** The number of rounds depends on the data (through the annealing), so the fit
charges the whole ρ up front (one release) and the rounds run as a privacy filter: the exact
composition of every step taken (each selection's ε²/8 and each measurement's map) is tracked
in fractions and can never exceed ρ (tested; the run raises before a step that would).

**Speed** (the reference needs hours on adult: it compiles small JAX operations while scoring):
the true counts of every candidate are counted once, inside DuckDB, in a few GROUPING SETS
queries; scores are numpy; the model's marginal of a candidate inside a junction-tree clique is
exact, and of any other candidate is read from a sample of the model (post-processing of the
released measurements: privacy is unaffected; the score is then an estimate of the model's
error); each round's refit is warm-started and short (``round_iterations``), the final fit long.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import numpy as np

from dpkit.analytics._planner._noise import sqrt_down
from dpkit.core._losses import ZCDP, PrivacyLoss, compose
from dpkit.errors import InvalidParameterError, PrivacyCheckError
from dpkit.mechanisms import make_discrete_gaussian, make_exponential
from dpkit.synth._model import GraphicalModel, JunctionTree, Measurement, estimate

__all__ = [
    "DEFAULT_MAX_MODEL_MB",
    "AIMPlan",
    "AIMRun",
    "candidates",
    "error_report",
    "model_size_mb",
    "run_aim",
    "scores",
]

Clique = tuple[int, ...]
DEFAULT_MAX_MODEL_MB = 80.0
"""The reference's limit on the junction tree's size (float64 cells), in MB (2**20 bytes)."""
ROUND_ITERATIONS = 300
"""At most this many warm-started estimation steps after each round."""
ROUND_TOLERANCE = 0.05
"""A round's refit stops once the chosen marginal moved by less than this share of AIM's
annealing threshold √(2/π)·σ·n_r over 25 steps."""
ONE_WAY_BOOST = 4
"""The initial 1-way measurements get this many times a round's measurement budget (capped at
ρ/(2d) in all): AIM rarely measures a 1-way marginal again, and at the reference's share the
high-cardinality columns of adult kept an L1 error of 0.04-0.09 each (0.02-0.04 at 4x)."""


def candidates(workload: Sequence[Clique]) -> dict[Clique, int]:
    """Every non-empty subset of a workload marginal, with AIM's weight Σ_s |r ∩ s|."""
    sets = {tuple(sorted(s)) for s in workload}
    out: dict[Clique, int] = {}
    for s in sorted(sets, key=lambda c: (len(c), c)):
        for k in range(1, len(s) + 1):
            for r in itertools.combinations(s, k):
                out.setdefault(r, 0)
    for r in out:
        out[r] = sum(len(set(r) & set(s)) for s in sets)
    return dict(sorted(out.items(), key=lambda kv: (len(kv[0]), kv[0])))


def model_size_mb(shape: Sequence[int], cliques: Sequence[Clique]) -> float:
    """The size in MB of a junction tree's clique tables over ``cliques`` (float64)."""
    tree = JunctionTree.build(shape, list(cliques))
    return sum(math.prod(shape[a] for a in c) for c in tree.cliques) * 8 / 2**20


@dataclass(frozen=True)
class AIMPlan:
    """The public plan of one AIM run."""

    shape: tuple[int, ...]
    rho: Fraction
    workload: tuple[Clique, ...]
    contributions: int = 1
    rounds: int | None = None
    max_model_mb: float = DEFAULT_MAX_MODEL_MB

    @property
    def d(self) -> int:
        return len(self.shape)

    @property
    def total_rounds(self) -> int:
        return self.rounds if self.rounds is not None else 16 * self.d

    @property
    def initial(self) -> tuple[Fraction, Fraction]:
        """(ρ of a measurement, ρ of a selection) at the start."""
        t = self.total_rounds
        return self.rho * Fraction(9, 10) / t, self.rho * Fraction(1, 10) / t

    @property
    def one_way_rho(self) -> Fraction:
        """ρ of each initial 1-way measurement: ``ONE_WAY_BOOST`` times a round's, at most
        ρ/(2d) (so the rounds keep at least half the budget)."""
        return min(self.initial[0] * ONE_WAY_BOOST, self.rho / (2 * self.d))

    @property
    def weights(self) -> dict[Clique, int]:
        return candidates(self.workload)

    @property
    def select_sensitivity(self) -> int:
        return self.contributions * max(self.weights.values())

    def charge(self) -> PrivacyLoss:
        """The charge: the whole ρ (the rounds are a filter that stops when it is spent)."""
        return ZCDP(self.rho)

    def check(self) -> None:
        """Refuse a plan that cannot run (public inputs only)."""
        if self.total_rounds <= self.d:
            raise InvalidParameterError(
                "rounds",
                self.rounds,
                f"an integer > {self.d} (the number of columns: the first round measures "
                "every 1-way marginal)",
            )
        hint = (
            f"The model size limit is {self.max_model_mb:g} MB (float64 junction-tree tables): "
            "bin the columns more coarsely, choose smaller marginals, or raise the limit with "
            "max_model_mb= (--max-model-mb on the command line) if the memory is there."
        )
        floor = model_size_mb(self.shape, [(a,) for a in range(self.d)])
        if floor > self.max_model_mb:
            raise InvalidParameterError(
                "max_model_mb", self.max_model_mb, f">= {floor:.3g} (the 1-way tables)", hint
            )


@dataclass
class AIMRun:
    """What one run released and the steps it took."""

    measurements: list[Measurement] = field(default_factory=list)
    selected: list[Clique] = field(default_factory=list)
    steps: list[tuple[str, PrivacyLoss]] = field(default_factory=list)
    model: GraphicalModel | None = None
    spent: Fraction = Fraction(0)
    workload: tuple[Clique, ...] = ()


def scores(
    tables: dict[Clique, np.ndarray],
    estimates: dict[Clique, np.ndarray],
    weights: dict[Clique, int],
    sigma: float,
) -> np.ndarray:
    """AIM's scores w_r·(‖x_r − x̂_r‖₁ − √(2/π)·σ·n_r), in the order of ``estimates``."""
    out = np.empty(len(estimates))
    bias = math.sqrt(2 / math.pi) * sigma
    for i, (r, xhat) in enumerate(estimates.items()):
        x = tables[r]
        out[i] = weights[r] * (float(np.abs(x - xhat).sum()) - bias * x.size)
    return out


def _estimates(model: GraphicalModel, cliques: Sequence[Clique]) -> dict[Clique, np.ndarray]:
    """The model's marginal of each clique, exact (inside a junction-tree clique or by variable
    elimination over the tree; post-processing)."""
    out = model.marginals(cliques)
    return {r: out[r] for r in cliques}


def selection_loss(epsilon: Fraction) -> ZCDP:
    """An ε-exponential mechanism is ε-bounded range, hence ε²/8-zCDP (Cesar & Rogers 2021)."""
    return ZCDP(epsilon * epsilon / 8)


def _gaussian(contributions: int, rho: Fraction) -> Any:
    return make_discrete_gaussian(contributions, rho=rho)


def run_aim(
    plan: AIMPlan,
    marginals: Callable[[], dict[Clique, np.ndarray]],
    *,
    iterations: int = 1000,
    round_iterations: int = ROUND_ITERATIONS,
    max_rounds: int | None = None,
    on_step: Callable[[str, PrivacyLoss], None] | None = None,
) -> AIMRun:
    """Run AIM on exact counts (``marginals()``: a table for every candidate of the plan)."""
    run = AIMRun(workload=plan.workload)
    c = plan.contributions
    shape = list(plan.shape)
    weights = plan.weights
    rho = plan.rho

    def step(kind: str, loss: PrivacyLoss) -> None:
        if not isinstance(loss, ZCDP):  # pragma: no cover - every step is zCDP
            raise PrivacyCheckError(f"internal check failed: AIM's step {loss} is not zCDP")
        spent = run.spent + loss.rho
        if spent > rho:  # the filter: never past the charge
            raise PrivacyCheckError(
                f"internal check failed: AIM would spend {spent} of its charge {rho}"
            )
        run.spent = spent
        run.steps.append((kind, loss))
        if on_step is not None:
            on_step(kind, loss)

    tables = marginals()
    rho_m, rho_s = plan.initial
    for a in range(plan.d):
        x = np.asarray(tables[(a,)])
        m = _gaussian(c, plan.one_way_rho)
        y = np.asarray(m(x.reshape(-1)), dtype=np.float64).reshape(x.shape)
        step("measure", m.map(c))
        run.measurements.append(Measurement((a,), y, np.asarray(float(m.info.sigma))))
    model = estimate(shape, run.measurements, iterations=iterations)
    sens = plan.select_sensitivity
    last = False
    while not last:
        if rho - run.spent < 2 * (rho_m + rho_s) or (
            max_rounds is not None and len(run.selected) + 1 >= max_rounds
        ):
            remaining = rho - run.spent
            rho_m, rho_s = remaining * Fraction(9, 10), remaining * Fraction(1, 10)
            last = True
        eps = sqrt_down(8 * rho_s)
        sel_loss = selection_loss(eps)
        limit = plan.max_model_mb * float((run.spent + sel_loss.rho + rho_m) / rho)
        free = {
            s
            for n in model.tree.cliques
            for k in range(1, len(n) + 1)
            for s in itertools.combinations(n, k)
        }
        eligible = [
            r for r in weights if r in free or model_size_mb(shape, [*model.cliques, r]) <= limit
        ]
        sigma = math.sqrt(c * c / (2 * float(rho_m)))
        estimates = _estimates(model, eligible)
        utility = scores(tables, estimates, weights, sigma)
        em = make_exponential(eps, sens)
        chosen = eligible[int(em(utility))]
        step("select", sel_loss)
        x = np.asarray(tables[chosen])
        m = _gaussian(c, rho_m)
        y = np.asarray(m(x.reshape(-1)), dtype=np.float64).reshape(x.shape)
        step("measure", m.map(c))
        sigma = float(m.info.sigma)
        run.measurements.append(Measurement(chosen, y, np.asarray(sigma)))
        run.selected.append(chosen)
        before = estimates[chosen]
        bound = math.sqrt(2 / math.pi) * sigma * x.size
        model = estimate(
            shape,
            run.measurements,
            iterations=iterations if last else round_iterations,
            start=model,
            watch=None if last else chosen,
            tolerance=ROUND_TOLERANCE * bound,
        )
        after = model.marginal(chosen)
        if float(np.abs(after - before).sum()) <= bound:
            rho_m, rho_s = 4 * rho_m, 4 * rho_s
    if compose(*(loss for _, loss in run.steps)) != ZCDP(run.spent):  # pragma: no cover
        raise PrivacyCheckError("internal check failed: AIM's steps do not compose")
    run.model = model
    return run


def error_report(
    model: GraphicalModel,
    measurements: Sequence[Measurement],
    workload: Sequence[Clique],
    alpha: float = 0.05,
) -> list[tuple[Clique, Clique | None, float, float, float]]:
    """For each workload marginal r: (r, the measured clique used, the L1 distance between the
    model's marginal and the noisy measurement projected on r, and a 1-α interval for the
    model's true L1 error on r), all normalised by the model's total; post-processing.

    Over a measured clique C ⊇ r, y_r = x_r + e with e the sum of the C cells' noise over
    each r cell: n_r coordinates, each sub-Gaussian with variance proxy s² = σ²·|C|/|r| (the
    discrete Gaussian is sub-Gaussian with parameter σ, Canonne, Kamath & Steinke 2020).
    ‖e‖₁ is √n_r-Lipschitz in e, so P(‖e‖₁ ≥ n_r·s·√(2/π) + s·√(2·n_r·ln(1/α))) ≤ α (Gaussian
    concentration) and, by the triangle inequality, ‖μ_r − x_r‖₁ ∈ [a − b, a + b] with
    a = ‖μ_r − y_r‖₁ and b that bound. The most precise measured superset is used; a marginal
    inside no measured clique has no interval (NaN), as AIM's bound for it rests on the
    private selection scores."""
    total = model.total
    out: list[tuple[Clique, Clique | None, float, float, float]] = []
    for r in workload:
        best: tuple[float, Measurement] | None = None
        for m in measurements:
            if set(r) <= set(m.clique):
                sigma = float(np.max(m.std))
                s2 = sigma * sigma * m.values.size / max(1, math.prod(model.shape[a] for a in r))
                if best is None or s2 < best[0]:
                    best = (s2, m)
        if best is None:
            out.append((r, None, math.nan, math.nan, math.nan))
            continue
        s2, m = best
        s = math.sqrt(s2)
        y = _reduce_to(m.values, m.clique, r)
        mu = model.marginal(r)
        n = y.size
        a = float(np.abs(mu - y).sum())
        b = n * s * math.sqrt(2 / math.pi) + s * math.sqrt(2 * n * math.log(1 / alpha))
        out.append((r, m.clique, a / total, max(0.0, a - b) / total, (a + b) / total))
    return out


def _reduce_to(values: np.ndarray, clique: Clique, keep: Clique) -> np.ndarray:
    axes = tuple(i for i, a in enumerate(clique) if a not in keep)
    return np.asarray(values.sum(axis=axes)) if axes else values
