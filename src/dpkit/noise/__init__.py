"""dpkit.noise: the only module that draws randomness.

* :func:`generator` – the process-wide cryptographically secure generator (AES-CTR, OS-keyed);
* :func:`insecure_deterministic_seed` – a deterministic generator for tests, loudly insecure;
* exact samplers: :func:`bernoulli`, :func:`bernoulli_exp`, :func:`bernoulli_logistic` (and
  :func:`bernoulli_logistic_bytes`, the same coin from ~1 byte), :func:`geometric_exp`,
  :func:`discrete_laplace`, :func:`discrete_gaussian`, :func:`uniform_integers`;
* the output grid (:mod:`dpkit.noise._grid`) on which every continuous-valued mechanism releases.
"""

from dpkit.noise._exact import (
    bernoulli,
    bernoulli_exp,
    bernoulli_exp_vector,
    bernoulli_logistic,
    bernoulli_logistic_bytes,
    discrete_gaussian,
    discrete_laplace,
    geometric_exp,
    uniform_integers,
)
from dpkit.noise._rng import (
    InsecureRandomnessWarning,
    generator,
    insecure_deterministic_seed,
    is_secure,
    random_bytes,
    random_words,
)

__all__ = [
    "InsecureRandomnessWarning",
    "bernoulli",
    "bernoulli_exp",
    "bernoulli_exp_vector",
    "bernoulli_logistic",
    "bernoulli_logistic_bytes",
    "discrete_gaussian",
    "discrete_laplace",
    "generator",
    "geometric_exp",
    "insecure_deterministic_seed",
    "is_secure",
    "random_bytes",
    "random_words",
    "uniform_integers",
]
