"""dpkit.ml: differentially private machine learning with declared bounds, scikit-learn style.

* :class:`KMeans` – private k-means: an LSH-grid coreset refined by DPLloyd (default), plain
  DPLloyd, or the exponential mechanism over a public lattice of candidate centres.
* :class:`LinearRegression` – private linear regression from noisy sufficient statistics, with
  AdaSSP's private ridge (Wang 2018) by default.

Every estimator is private under adding or removing one row, reports ``privacy_loss_`` and, when
given a ledger, reserves that loss before reading data. docs/ml.md has the proofs and accuracy.
"""

from dpkit.ml._kmeans import KMeans
from dpkit.ml._linear import LinearRegression

__all__ = ["KMeans", "LinearRegression"]
