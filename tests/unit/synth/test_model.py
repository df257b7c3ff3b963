"""The numpy Private-PGM: junction trees, belief propagation, estimation and rounding."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from dpkit.synth._model import GraphicalModel, JunctionTree, Measurement, estimate, round_sample


def _brute(model: GraphicalModel) -> np.ndarray:
    """The model's full joint (counts) by summing the potentials over the whole domain."""
    d = len(model.shape)
    log_p = np.zeros(model.shape)
    for c, t in model.theta.items():
        shape = [model.shape[a] if a in c else 1 for a in range(d)]
        log_p = log_p + t.reshape(shape)
    p = np.exp(log_p - log_p.max())
    return model.total * p / p.sum()


@pytest.mark.parametrize(
    "cliques",
    [
        [(0, 1), (1, 2), (1, 3)],  # a tree (MST's case)
        [(0, 1), (1, 2), (0, 2), (2, 3)],  # a cycle: triangulated (AIM's case)
        [(0, 1, 2), (2, 3), (3, 0)],
        [(0,), (1,), (2,), (3,)],
        [(0, 1, 2, 3), (0, 1), (1, 2), (2, 3), (0,), (3,), (0, 2, 3), (1, 3)],  # one big clique
    ],
)
def test_belief_propagation_gives_the_exact_marginals(cliques: list[tuple[int, ...]]) -> None:
    rng = np.random.default_rng(0)
    shape = (2, 3, 4, 2)
    model = GraphicalModel(shape, cliques, total=1000.0)
    for c in model.theta:
        model.theta[c] = rng.normal(size=model.theta[c].shape)
    model.calibrate()
    joint = _brute(model)
    for c in [*cliques, (0,), (3,), (1, 2)]:
        if not any(set(c) <= set(n) for n in model.tree.cliques):
            continue
        axes = tuple(a for a in range(4) if a not in c)
        np.testing.assert_allclose(model.marginal(c), joint.sum(axis=axes), rtol=1e-10)
    # all at once (the held cliques summed out of their junction-tree clique together)
    for c, mu in model.marginals(cliques).items():
        axes = tuple(a for a in range(4) if a not in c)
        np.testing.assert_allclose(mu, joint.sum(axis=axes), rtol=1e-10)


def test_the_junction_tree_has_the_running_intersection_property() -> None:
    cliques = [(0, 1), (1, 2), (2, 3), (3, 0), (3, 4), (4, 5), (5, 3)]
    tree = JunctionTree.build([2] * 6, cliques)
    for c in cliques:
        assert any(set(c) <= set(n) for n in tree.cliques)
    # every attribute's cliques form a connected subtree
    for a in range(6):
        holding = {i for i, n in enumerate(tree.cliques) if a in n}
        edges = [(p, q) for p, q in tree.edges if p in holding and q in holding]
        assert len(edges) == len(holding) - 1


def test_estimation_recovers_consistent_measurements() -> None:
    rng = np.random.default_rng(1)
    shape = (3, 4, 2)
    joint = rng.dirichlet(np.ones(24)).reshape(shape) * 5000
    m01 = Measurement((0, 1), joint.sum(axis=2), np.asarray(1.0))
    m12 = Measurement((1, 2), joint.sum(axis=0), np.asarray(1.0))
    model = estimate(shape, [m01, m12], iterations=500)
    assert model.total == pytest.approx(5000)
    np.testing.assert_allclose(model.marginal((0, 1)), m01.values, atol=0.5)
    np.testing.assert_allclose(model.marginal((1, 2)), m12.values, atol=0.5)


def test_rounding_gives_each_group_its_rounded_counts() -> None:
    probs = np.array([[0.5, 0.25, 0.25], [0.0, 0.0, 0.0], [0.1, 0.6, 0.3]])
    groups = np.repeat(np.arange(3), [8, 3, 10])
    np.random.default_rng(2).shuffle(groups)
    values = round_sample(probs, groups)
    for g, size in enumerate([8, 3, 10]):
        counts = np.bincount(values[groups == g], minlength=3)
        assert counts.sum() == size
        p = probs[g] if probs[g].sum() else np.full(3, 1 / 3)
        target = p * size
        assert np.all(counts >= np.floor(target)) and np.all(counts <= np.ceil(target))


def test_rounding_spreads_each_value_evenly_over_the_rows_ordered_by_earlier_columns() -> None:
    """Rows sorted by an earlier column get each value in proportion within every run of
    equal keys (within about one row per value), not the hypergeometric spread of a shuffle:
    the joint counts of (earlier column, new value) track n_x·p(v)."""
    rng = np.random.default_rng(4)
    earlier = rng.integers(0, 7, 4000)
    groups = np.zeros(4000, dtype=np.int64)
    probs = np.array([[0.45, 0.3, 0.15, 0.1]])
    values = round_sample(probs, groups, [earlier])
    assert np.array_equal(np.bincount(values, minlength=4), [1800, 1200, 600, 400])
    for x in range(7):
        counts = np.bincount(values[earlier == x], minlength=4)
        assert np.all(np.abs(counts - probs[0] * (earlier == x).sum()) <= 1.5)


def test_calibration_falls_back_to_log_space_when_potentials_underflow() -> None:
    """Potentials spanning more than exp(700) underflow in probability space: the log-space
    pass gives the exact marginals instead."""
    shape = (2, 3, 2)
    model = GraphicalModel(shape, [(0, 1), (1, 2)], total=10.0)
    model.theta[(0, 1)] = np.array([[0.0, -900.0, -900.0], [-900.0, -900.0, -900.0]])
    model.theta[(1, 2)] = np.array([[-900.0, -900.0], [-900.0, -900.0], [0.0, 0.0]])
    model.calibrate()
    joint = _brute(model)
    for c in [(0, 1), (1, 2)]:
        axes = tuple(a for a in range(3) if a not in c)
        np.testing.assert_allclose(model.marginal(c), joint.sum(axis=axes), rtol=1e-9)
    assert np.isclose(model.marginal((0, 1)).sum(), 10.0)


def test_sampling_reproduces_the_model_marginals() -> None:
    rng = np.random.default_rng(3)
    shape = (3, 4, 2)
    model = GraphicalModel(shape, [(0, 1), (1, 2)], total=3000.0)
    for c in model.theta:
        model.theta[c] = rng.normal(size=model.theta[c].shape)
    model.calibrate()
    rows = model.sample(3000)
    for c in [(0, 1), (1, 2)]:
        counts = np.zeros([shape[a] for a in c])
        np.add.at(counts, tuple(rows[:, a] for a in c), 1)
        assert np.abs(counts - model.marginal(c)).sum() / 3000 < 0.02
    assert set(itertools.chain(rows[:, 2].tolist())) <= {0, 1}


def test_a_warm_start_continues_from_another_models_potentials() -> None:
    rng = np.random.default_rng(4)
    shape = (3, 4, 2)
    joint = rng.dirichlet(np.ones(24)).reshape(shape) * 5000
    m01 = Measurement((0, 1), joint.sum(axis=2), np.asarray(1.0))
    m12 = Measurement((1, 2), joint.sum(axis=0), np.asarray(1.0))
    first = estimate(shape, [m01], iterations=300)
    # the second model has one more clique; with no step at all it keeps first's potentials on
    # (0, 1), and its new clique starts where the new measurement pulls first's marginal
    second = estimate(shape, [m01, m12], iterations=0, start=first)
    np.testing.assert_allclose(second.theta[(0, 1)], first.theta[(0, 1)], rtol=1e-12)
    before = np.abs(first.marginal((1, 2)) - m12.values).sum()
    after = np.abs(second.marginal((1, 2)) - m12.values).sum()
    assert after < 0.2 * before


def test_a_watched_refit_stops_once_the_watched_marginal_settles() -> None:
    rng = np.random.default_rng(5)
    shape = (3, 4, 2)
    joint = rng.dirichlet(np.ones(24)).reshape(shape) * 5000
    m01 = Measurement((0, 1), joint.sum(axis=2), np.asarray(1.0))
    m12 = Measurement((1, 2), joint.sum(axis=0), np.asarray(1.0))
    first = estimate(shape, [m01], iterations=100)
    early = estimate(shape, [m01, m12], iterations=500, start=first, watch=(1, 2), tolerance=1e9)
    short = estimate(shape, [m01, m12], iterations=24, start=first)
    full = estimate(shape, [m01, m12], iterations=500, start=first)
    watched = estimate(shape, [m01, m12], iterations=500, start=first, watch=(1, 2))
    np.testing.assert_array_equal(early.marginal((1, 2)), short.marginal((1, 2)))
    np.testing.assert_array_equal(watched.marginal((1, 2)), full.marginal((1, 2)))


@pytest.mark.parametrize(
    ("cliques", "asked"),
    [
        (
            [(0, 1), (1, 2), (2, 3), (3, 4), (4, 5)],
            [(0, 5), (0, 2, 4), (1, 3, 5), (0, 1, 2, 3, 4, 5)],
        ),
        ([(0, 1, 2), (2, 3), (3, 4), (1, 5)], [(0, 4), (4, 5), (0, 3, 5)]),
        ([(0,), (1, 2), (3, 4, 5)], [(0, 1), (2, 4), (0, 2, 5)]),  # independent parts
    ],
)
def test_a_marginal_outside_every_clique_is_exact(
    cliques: list[tuple[int, ...]], asked: list[tuple[int, ...]]
) -> None:
    """Variable elimination over the smallest covering subtree gives the brute-force marginal
    (AIM scores candidates outside the model's cliques with it)."""
    rng = np.random.default_rng(6)
    shape = (2, 3, 2, 4, 2, 3)
    model = GraphicalModel(shape, cliques, total=700.0)
    for c in model.theta:
        model.theta[c] = rng.normal(size=model.theta[c].shape)
    model.calibrate()
    joint = _brute(model)
    for c in asked:
        assert not any(set(c) <= set(n) for n in model.tree.cliques)
        axes = tuple(a for a in range(6) if a not in c)
        np.testing.assert_allclose(model.marginal(c), joint.sum(axis=axes), rtol=1e-10)


def test_a_marginal_outside_every_clique_survives_a_separator_with_almost_no_mass() -> None:
    """A separator cell of probability ~1e-310 (subnormal): dividing by it overflows, and the
    product with a zero cell gave NaN (seen in an AIM run on adult); conditionals do not."""
    shape = (2, 3, 2, 2)
    model = GraphicalModel(shape, [(0, 1), (1, 2), (2, 3)], total=100.0)
    model.theta[(0, 1)] = np.array([[-713.0, 0.0, 0.0], [-713.0, 0.0, 1.0]])
    model.theta[(1, 2)] = np.array([[0.0, -745.0], [0.0, 0.0], [2.0, 0.0]])
    model.calibrate()
    joint = _brute(model)
    for c in [(0, 2), (0, 3), (0, 2, 3), (1, 3)]:
        got = model.marginal(c)
        assert np.isfinite(got).all()
        axes = tuple(a for a in range(4) if a not in c)
        np.testing.assert_allclose(got, joint.sum(axis=axes), rtol=1e-9, atol=1e-12)
