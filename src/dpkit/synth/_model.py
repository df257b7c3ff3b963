"""Private-PGM estimation and generation in numpy: a graphical model fitted to noisy marginals.

Given noisy measurements ``y_i`` of marginals over attribute sets (cliques) ``C_i`` with noise
standard deviations ``σ_i`` (per cell), the estimate is the distribution p (scaled to a total N)
minimising Σ_i ||(μ_{C_i} - y_i)/σ_i||² / 2 over the marginals μ of p (McKenna, Sheldon &
Miklau 2019, "Graphical-model based estimation and inference for differential privacy"). The
minimiser is a Markov random field over the measured cliques, p ∝ exp(Σ_C θ_C), found by mirror
descent on θ (entropic mirror descent on μ) with an Armijo line search, as Private-PGM's
``mirror_descent``; its marginals come from belief propagation on a junction tree of the
cliques (greedy min-fill triangulation, then a maximum spanning tree on separator sizes), so
any clique set works (AIM's cliques, not only MST's tree). Generation follows Private-PGM's
``synthetic_data`` with ``method="round"``: attributes are drawn clique by clique along the
junction tree, each conditioned on the attributes already drawn, and each group's counts are
rounded (integer parts, then the remaining rows to cells drawn without replacement in proportion
to the fractional parts), vectorised over the groups.

Everything here is post-processing of released measurements; randomness comes from
:mod:`dpkit.noise`.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from dpkit.noise import generator

__all__ = ["GraphicalModel", "JunctionTree", "Measurement", "estimate"]

Clique = tuple[int, ...]


@dataclass(frozen=True)
class Measurement:
    """A noisy marginal: ``values`` (C-order over the clique's attributes, sorted) and the
    standard deviation of each cell's noise (a scalar or an array of the same shape)."""

    clique: Clique
    values: np.ndarray
    std: np.ndarray


def _expand(values: np.ndarray, attrs: Clique, target: Clique) -> np.ndarray:
    """``values`` over sorted ``attrs`` broadcast to sorted ``target`` ⊇ attrs."""
    shape = [values.shape[attrs.index(a)] if a in attrs else 1 for a in target]
    return values.reshape(shape)


def logsumexp(values: np.ndarray, axis: tuple[int, ...] | None = None) -> np.ndarray:
    """log Σ exp(values) over ``axis`` (all axes if None), stable."""
    top = np.max(values, axis=axis, keepdims=True)
    top = np.where(np.isfinite(top), top, 0.0)
    out = np.log(np.sum(np.exp(values - top), axis=axis, keepdims=True)) + top
    return np.asarray(np.squeeze(out, axis=axis) if axis is not None else out.reshape(()))


def _reduce(values: np.ndarray, attrs: Clique, keep: Clique, *, log: bool) -> np.ndarray:
    axes = tuple(i for i, a in enumerate(attrs) if a not in keep)
    if not axes:
        return values
    if log:
        return logsumexp(values, axes)
    return np.asarray(values.sum(axis=axes))


@dataclass
class JunctionTree:
    """Maximal cliques of a triangulation of the cliques' graph, and a spanning tree of them
    (edges as (parent, child) from root 0 in breadth-first order)."""

    cliques: list[Clique]
    edges: list[tuple[int, int]]
    home: dict[Clique, int] = field(default_factory=dict)

    @classmethod
    def build(cls, shape: Sequence[int], cliques: Sequence[Clique]) -> JunctionTree:
        d = len(shape)
        adjacency: list[set[int]] = [set() for _ in range(d)]
        for c in cliques:
            for a in c:
                adjacency[a] |= set(c) - {a}
        # greedy elimination: fewest fill-in edges, then the smallest table
        remaining = set(range(d))
        maximal: list[frozenset[int]] = []
        adj = [set(s) for s in adjacency]
        while remaining:

            def cost(v: int) -> tuple[int, int]:
                nbrs = adj[v]
                fill = sum(1 for a in nbrs for b in nbrs if a < b and b not in adj[a])
                return fill, math.prod(shape[u] for u in nbrs | {v})

            v = min(sorted(remaining), key=cost)
            clique = frozenset(adj[v] | {v})
            if not any(clique <= m for m in maximal):
                maximal = [m for m in maximal if not m <= clique] + [clique]
            for a in adj[v]:
                adj[a] |= adj[v] - {a}
                adj[a].discard(v)
            remaining.discard(v)
        nodes = [tuple(sorted(m)) for m in maximal]
        nodes.sort(key=lambda c: (-len(c), c))
        # maximum spanning tree on separator sizes (Prim from node 0), breadth-first edges
        k = len(nodes)
        in_tree = [0]
        parent: dict[int, int] = {}
        while len(in_tree) < k:
            best: tuple[int, int, int] | None = None
            for i in in_tree:
                for j in range(k):
                    if j in parent or j == 0:
                        continue
                    w = len(set(nodes[i]) & set(nodes[j]))
                    if best is None or w > best[0]:
                        best = (w, i, j)
            if best is None:  # pragma: no cover - the loop runs while nodes are left
                break
            parent[best[2]] = best[1]
            in_tree.append(best[2])
        order = [0]
        edges = []
        for i in order:
            for j in in_tree:
                if parent.get(j) == i:
                    edges.append((i, j))
                    order.append(j)
        tree = cls(nodes, edges)
        for c in cliques:
            tree.home[c] = next(i for i, n in enumerate(nodes) if set(c) <= set(n))
        return tree


class GraphicalModel:
    """A Markov random field p ∝ exp(Σ_C θ_C) over ``shape``, scaled to ``total`` rows."""

    def __init__(self, shape: Sequence[int], cliques: Sequence[Clique], total: float) -> None:
        self.shape = tuple(int(s) for s in shape)
        self.cliques = [tuple(sorted(c)) for c in dict.fromkeys(tuple(sorted(c)) for c in cliques)]
        self.tree = JunctionTree.build(self.shape, self.cliques)
        self.total = float(total)
        self.theta = {c: np.zeros([self.shape[a] for a in c]) for c in self.cliques}
        self.beliefs: list[np.ndarray] = []
        self.calibrate()

    def _zeros(self, node: int) -> np.ndarray:
        return np.zeros([self.shape[a] for a in self.tree.cliques[node]])

    def calibrate(self) -> None:
        """Log-beliefs of every junction-tree clique (sum-product, collect then distribute)."""
        tree = self.tree
        potentials = [self._zeros(i) for i in range(len(tree.cliques))]
        for c, t in self.theta.items():
            i = tree.home[c]
            potentials[i] = potentials[i] + _expand(t, c, tree.cliques[i])
        up: dict[int, np.ndarray] = {}
        incoming: list[np.ndarray] = [p.copy() for p in potentials]
        for parent, child in reversed(tree.edges):
            sep = tuple(sorted(set(tree.cliques[parent]) & set(tree.cliques[child])))
            msg = _reduce(incoming[child], tree.cliques[child], sep, log=True)
            up[child] = msg
            incoming[parent] = incoming[parent] + _expand(msg, sep, tree.cliques[parent])
        beliefs = incoming
        for parent, child in tree.edges:
            sep = tuple(sorted(set(tree.cliques[parent]) & set(tree.cliques[child])))
            msg = _reduce(beliefs[parent], tree.cliques[parent], sep, log=True) - up[child]
            beliefs[child] = beliefs[child] + _expand(msg, sep, tree.cliques[child])
        log_z = float(logsumexp(beliefs[0]))
        self.beliefs = [b - log_z for b in beliefs]
        self._probs: dict[int, np.ndarray] = {}

    def probabilities(self, node: int) -> np.ndarray:
        """The junction-tree clique's distribution (sums to 1)."""
        probs = self._probs.get(node)
        if probs is None:
            probs = self._probs[node] = np.exp(self.beliefs[node])
        return probs

    def marginal(self, clique: Clique) -> np.ndarray:
        """The model's marginal (counts summing to ``total``) over a clique inside one
        junction-tree clique."""
        c = tuple(sorted(clique))
        i = self.tree.home.get(c)
        if i is None:
            i = next(j for j, n in enumerate(self.tree.cliques) if set(c) <= set(n))
        return self.total * _reduce(self.probabilities(i), self.tree.cliques[i], c, log=False)

    def sample(self, rows: int) -> np.ndarray:
        """``rows`` records (indices, one column per attribute) by Private-PGM's rounding."""
        d = len(self.shape)
        out = np.zeros((rows, d), dtype=np.int64)
        drawn: list[int] = []
        order = [0] + [child for _, child in self.tree.edges]
        for node in order:
            nodes = self.tree.cliques[node]
            probs = self.probabilities(node)
            for a in nodes:
                if a in drawn:
                    continue
                given = tuple(b for b in nodes if b in drawn)
                joint = _reduce(probs, nodes, tuple(sorted((*given, a))), log=False)
                keep = tuple(sorted((*given, a)))
                # axes: given attributes first (as ordered in keep), then a
                perm = [keep.index(b) for b in given] + [keep.index(a)]
                table = np.transpose(joint, perm).reshape(-1, self.shape[a])
                if given:
                    groups = np.ravel_multi_index(
                        tuple(out[:, b] for b in given), [self.shape[b] for b in given]
                    )
                else:
                    groups = np.zeros(rows, dtype=np.int64)
                out[:, a] = round_sample(table, groups)
                drawn.append(a)
        return out


def round_sample(table: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """One value per row: the rows of group g get value counts n_g·p_g(v) rounded (integer
    parts, then the remaining rows to values drawn without replacement ∝ the fractional parts),
    in a uniformly random order within the group (Private-PGM's ``synthetic_col``), for all
    groups at once. Rows of a group with no mass are spread uniformly."""
    g_count, k = table.shape
    rng = generator(2 * (groups.size + g_count * k))
    sizes = np.bincount(groups, minlength=g_count).astype(np.float64)
    weights = np.clip(np.asarray(table, dtype=np.float64), 0.0, None)
    mass = weights.sum(axis=1, keepdims=True)
    probs = np.where(mass > 0, weights / np.where(mass > 0, mass, 1.0), 1.0 / k)
    target = probs * sizes[:, None]
    integ = np.floor(target)
    frac = target - integ
    extra = (sizes - integ.sum(axis=1)).round().astype(np.int64)
    with np.errstate(divide="ignore"):
        keys = np.log(rng.random((g_count, k))) / frac  # Efraimidis-Spirakis keys, -inf at 0
    rank = np.argsort(np.argsort(-keys, axis=1, kind="stable"), axis=1, kind="stable")
    counts = integ.astype(np.int64) + (rank < extra[:, None])
    values = np.repeat(np.tile(np.arange(k, dtype=np.int64), g_count), counts.reshape(-1))
    order = np.lexsort((rng.random(groups.size), groups))
    out = np.empty(groups.size, dtype=np.int64)
    out[order] = values
    return out


def estimate_total(measurements: Sequence[Measurement]) -> float:
    """The inverse-variance weighted mean of the measurements' totals (at least 1)."""
    num = den = 0.0
    for m in measurements:
        var = float(np.sum(np.broadcast_to(m.std, m.values.shape) ** 2))
        num += float(m.values.sum()) / var
        den += 1.0 / var
    return max(num / den, 1.0)


def _loss(
    model: GraphicalModel, measurements: Sequence[Measurement]
) -> tuple[float, dict[Clique, np.ndarray], dict[Clique, np.ndarray]]:
    """(loss, gradient and marginal per measured clique) of Σ ||(μ_C - y)/σ||²/2."""
    loss = 0.0
    grads: dict[Clique, np.ndarray] = {}
    mus: dict[Clique, np.ndarray] = {}
    for m in measurements:
        mu = mus.get(m.clique)
        if mu is None:
            mu = mus[m.clique] = model.marginal(m.clique)
        diff = (mu - m.values) / m.std
        loss += 0.5 * float(np.sum(diff * diff))
        g = diff / m.std
        grads[m.clique] = grads[m.clique] + g if m.clique in grads else g
    return loss, grads, mus


def estimate(
    shape: Sequence[int],
    measurements: Sequence[Measurement],
    *,
    iterations: int = 1000,
    cliques: Sequence[Clique] = (),
    total: float | None = None,
) -> GraphicalModel:
    """The graphical model over ``shape`` fitted to ``measurements`` by ``iterations`` steps
    of mirror descent: θ ← θ - α∇L(μ(θ)), a step kept only if it meets the Armijo condition
    L(μ) - L(μ') >= α/2·⟨∇L, μ - μ'⟩, α grown by 1 % after a kept step and halved after a
    refused one (Private-PGM's ``mirror_descent``), starting from α = 2·min σ²/N (the inverse
    of the loss's Lipschitz constant times 2/N)."""
    all_cliques = [m.clique for m in measurements] + [tuple(sorted(c)) for c in cliques]
    n = estimate_total(measurements) if total is None else float(total)
    model = GraphicalModel(shape, all_cliques, n)
    loss, grads, mus = _loss(model, measurements)
    smallest = min(float(np.min(m.std)) for m in measurements)
    alpha = 2.0 * smallest**2 / model.total
    for _ in range(iterations):
        theta = {c: t.copy() for c, t in model.theta.items()}
        for c, g in grads.items():
            model.theta[c] = theta[c] - alpha * g
        model.calibrate()
        new_loss, new_grads, new_mus = _loss(model, measurements)
        decrease = sum(float(np.sum(g * (mus[c] - new_mus[c]))) for c, g in grads.items())
        if loss - new_loss >= 0.5 * alpha * decrease:
            loss, grads, mus = new_loss, new_grads, new_mus
            alpha *= 1.01
        else:
            model.theta = theta
            alpha *= 0.5
    model.calibrate()
    return model
