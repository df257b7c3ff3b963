"""The declared-domain aggregations ``marginals(...)`` and ``ranges(...)``: specs and builders.

Everything here reads public inputs only (the builders' arguments): a bad clique, an empty or
repeated domain, or a domain too large for the strategy's memory is refused with an
:class:`~dpkit.errors.InvalidParameterError` that names the parameter, the value and what is
allowed, before any data is read. The check of declared values against the table's schema
(:func:`dpkit.analytics._planner._validate.check_against_schema`) is the planner's.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Any

from dpkit._exact import fraction_of
from dpkit.analytics._engines._columns import canonical
from dpkit.analytics._keys import check_key_value, check_name
from dpkit.errors import InvalidParameterError

__all__ = [
    "MAX_MARGINAL_CELLS",
    "MAX_RANGE_CELLS",
    "MarginalCounts",
    "RangeCounts",
    "build_marginals",
    "build_ranges",
    "render",
]

MAX_MARGINAL_CELLS = 65_536
"""The largest product domain a ``marginals`` query counts in one GROUP BY over declared keys.

The engine receives the product as a public key set (one VALUES row per cell) and the release
holds a few float64 tables of that size; 65,536 cells keep both at a few MB."""

MAX_RANGE_CELLS = 2048
"""The largest domain of a ``ranges`` query: the strategy's reconstruction uses dense n×n
matrices (three of them: 24·n² bytes, 100 MB at n = 2048) and an O(n³) factorisation."""

_WAYS = {"all_1way": 1, "all_2way": 2, "all_3way": 3}


@dataclass(frozen=True, slots=True)
class MarginalCounts:
    """Counts of every cell of each marginal (``cliques``, tuples of indices into ``columns``)
    over declared, public domains; built by :func:`~dpkit.analytics._query.marginals`.
    Released as its own table."""

    columns: tuple[str, ...]
    domains: tuple[tuple[Any, ...], ...]
    cliques: tuple[tuple[int, ...], ...]
    name: str
    weight: Fraction = Fraction(1)


@dataclass(frozen=True, slots=True)
class RangeCounts:
    """Range counts over an ordered column with a declared domain (``kind``: ``"prefix"``,
    ``"all_range"`` or ``"width"``); built by :func:`~dpkit.analytics._query.ranges`.
    Released as its own table."""

    column: str
    domain: tuple[float | int, ...]
    kind: str
    width: int
    name: str
    weight: Fraction = Fraction(1)


def _domain_values(column: str, values: object) -> tuple[Any, ...]:
    if isinstance(values, str | bytes) or not isinstance(values, Sequence | set | frozenset):
        raise InvalidParameterError(
            "domains", values, f"a list of the public values of {column!r} (at least two)"
        )
    out = tuple(values)
    for v in out:
        try:
            check_key_value(v)
        except InvalidParameterError as error:
            raise InvalidParameterError("domains", v, f"{error.allowed} for {column!r}") from None
    if len(out) < 2:
        raise InvalidParameterError(
            "domains",
            list(out),
            f"at least two distinct values for {column!r} (a one-value domain has no marginal)",
        )
    seen: set[Any] = set()
    for v in out:
        key = canonical(v)
        if key in seen:
            raise InvalidParameterError("domains", v, f"distinct values for {column!r}")
        seen.add(key)
    return out


def build_marginals(
    cliques: Sequence[Sequence[str]] | str,
    domains: Mapping[str, Sequence[Any]],
    name: str,
    weight: Fraction,
) -> MarginalCounts:
    if not isinstance(domains, Mapping) or not domains:
        raise InvalidParameterError(
            "domains", domains, "a mapping {column: [public values, ...]}, one per column"
        )
    declared = {check_name(c, "domains"): _domain_values(c, v) for c, v in domains.items()}
    names = list(declared)
    if isinstance(cliques, str):
        if cliques not in _WAYS:
            raise InvalidParameterError(
                "cliques", cliques, f"a list of column tuples or one of {sorted(_WAYS)}"
            )
        k = _WAYS[cliques]
        if k > len(names):
            raise InvalidParameterError(
                "cliques", cliques, f"at most all_{len(names)}way for {len(names)} declared columns"
            )
        sets = [tuple(c) for c in itertools.combinations(names, k)]
    else:
        if not isinstance(cliques, Sequence) or not cliques:
            raise InvalidParameterError(
                "cliques", cliques, "a non-empty list of tuples of declared columns"
            )
        sets = []
        for clique in cliques:
            members = (clique,) if isinstance(clique, str) else tuple(clique)
            if not members:
                raise InvalidParameterError("cliques", clique, "a non-empty tuple of columns")
            for c in members:
                if c not in declared:
                    raise InvalidParameterError(
                        "cliques",
                        clique,
                        f"columns with a declared domain ({', '.join(map(repr, names))}); "
                        f"{c!r} has none",
                    )
            if len(set(members)) != len(members):
                raise InvalidParameterError("cliques", clique, "distinct columns in a clique")
            sets.append(members)
    used = [c for c in names if any(c in s for s in sets)]
    index = {c: i for i, c in enumerate(used)}
    canon: list[tuple[int, ...]] = []
    for s in sets:
        t = tuple(sorted(index[c] for c in s))
        if t in canon:
            raise InvalidParameterError("cliques", s, "distinct marginals (this one repeats)")
        canon.append(t)
    sizes = [len(declared[c]) for c in used]
    cells = math.prod(sizes)
    if cells > MAX_MARGINAL_CELLS:
        raise InvalidParameterError(
            "domains",
            " × ".join(f"{c}: {n}" for c, n in zip(used, sizes, strict=True)),
            f"a product of at most {MAX_MARGINAL_CELLS:,} cells over the clique columns "
            f"(this one has {cells:,}: its key set and tables would take about "
            f"{cells * 200 / 2**20:,.0f} MB before any data is read)",
            "Coarsen a domain, or split the query into marginals over fewer columns.",
        )
    return MarginalCounts(tuple(used), tuple(declared[c] for c in used), tuple(canon), name, weight)


def build_ranges(
    column: str,
    domain: object,
    kind: object,
    width: object,
    name: str,
    weight: Fraction,
) -> RangeCounts:
    if kind not in ("prefix", "all_range", "width"):
        raise InvalidParameterError("kind", kind, "'prefix', 'all_range' or 'width'")
    values: list[float | int]
    if (
        isinstance(domain, tuple)
        and len(domain) == 3
        and all(isinstance(v, int) and not isinstance(v, bool) for v in domain)
    ):
        lo, hi, step = domain
        if step <= 0 or hi <= lo:
            raise InvalidParameterError(
                "domain", domain, "(lo, hi, step) integers with lo < hi and step > 0"
            )
        n = (hi - lo) // step + 1
        if n > MAX_RANGE_CELLS:
            raise InvalidParameterError(
                "domain",
                domain,
                f"at most {MAX_RANGE_CELLS:,} cells (this one has {n:,}; the strategy's dense "
                f"n×n matrices would take {24 * n * n / 2**20:,.0f} MB)",
                "Use a coarser step.",
            )
        values = [lo + i * step for i in range(n)]
    else:
        if isinstance(domain, str | bytes) or not isinstance(domain, Sequence):
            raise InvalidParameterError(
                "domain", domain, "increasing numbers, or (lo, hi, step) integers"
            )
        values = []
        for i, v in enumerate(domain):
            if isinstance(v, bool):
                raise InvalidParameterError("domain", v, "numbers (not booleans)")
            exact = fraction_of(f"domain[{i}]", v)
            values.append(int(exact) if exact.denominator == 1 else float(exact))
        if len(values) < 2 or any(b <= a for a, b in itertools.pairwise(values)):
            raise InvalidParameterError(
                "domain", domain, "at least two strictly increasing numbers"
            )
        if len(values) > MAX_RANGE_CELLS:
            n = len(values)
            raise InvalidParameterError(
                "domain",
                f"{n:,} values",
                f"at most {MAX_RANGE_CELLS:,} cells (the strategy's dense n×n matrices would "
                f"take {24 * n * n / 2**20:,.0f} MB)",
            )
    n = len(values)
    w = 0
    if kind == "width":
        if isinstance(width, bool) or not isinstance(width, int) or not 1 <= width <= n:
            raise InvalidParameterError("width", width, f"an integer in 1..{n} for kind='width'")
        w = width
    elif width is not None:
        raise InvalidParameterError("width", width, "None unless kind='width'")
    return RangeCounts(column, tuple(values), str(kind), w, name, weight)


def render(agg: MarginalCounts | RangeCounts) -> str:
    if isinstance(agg, RangeCounts):
        extra = f", width {agg.width}" if agg.kind == "width" else ""
        return (
            f"ranges({agg.column}, {agg.kind}{extra}, {len(agg.domain)} declared cells) as "
            f"{agg.name}"
        )
    shown = ", ".join("×".join(agg.columns[i] for i in c) for c in agg.cliques)
    cells = math.prod(len(d) for d in agg.domains)
    return f"marginals([{shown}], {cells} declared cells) as {agg.name}"
