"""dpkit.ml: differentially private machine learning with declared bounds, scikit-learn style.

* :class:`KMeans` – private k-means: an LSH-grid coreset refined by DPLloyd (default), plain
  DPLloyd, or the exponential mechanism over a public lattice of candidate centres.
* :class:`LinearRegression` – private linear regression from noisy sufficient statistics, with
  AdaSSP's private ridge (Wang 2018) by default.
* :func:`fit_linear_regression` – the same model fitted on a :class:`dpkit.analytics.Session`'s
  columns: the sufficient statistics come from one Session query (one engine pass).
* :func:`fit_kmeans` – :class:`KMeans` on a Session's columns: Lloyd iterations and the LSH
  coreset are grouped aggregate queries whose assignment (nearest centre, grid cell) the engine
  computes (DuckDB, Spark, pandas); the whole loss is reserved once before the first read.

Every estimator is private under adding or removing one row, reports ``privacy_loss_`` and, when
given a ledger, reserves that loss before reading data. docs/ml.md has the proofs and accuracy.
"""

from dpkit._extras import require

require("ml", by="dpkit.ml")

from dpkit.ml._kmeans import KMeans
from dpkit.ml._linear import LinearRegression, UnboundedIntervalWarning
from dpkit.ml._session import fit_kmeans, fit_linear_regression

__all__ = [
    "KMeans",
    "LinearRegression",
    "UnboundedIntervalWarning",
    "fit_kmeans",
    "fit_linear_regression",
]
