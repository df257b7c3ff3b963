"""The one source of randomness in dpkit.

By default every draw comes from AES-128 in counter mode (randomgen's ``AESCounter``, using AES-NI
where the CPU has it) keyed with 128 bits from ``os.urandom``: the CTR-DRBG construction, a
cryptographically secure generator. The key is refreshed after 2^32 draws and in a forked child
(so two processes never share a stream).

A deterministic generator exists for tests only, behind :func:`insecure_deterministic_seed`, which
warns with :class:`InsecureRandomnessWarning` every time it is switched on. Nothing released
under it is private.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterator
from contextlib import contextmanager

import numpy as np
from randomgen import AESCounter

__all__ = [
    "InsecureRandomnessWarning",
    "generator",
    "insecure_deterministic_seed",
    "is_secure",
    "random_bytes",
    "random_words",
]


class InsecureRandomnessWarning(UserWarning):
    """A deterministic, non-cryptographic generator is in use: outputs are NOT private."""


_RESEED_AFTER_WORDS = 1 << 32


class _State:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.generator: np.random.Generator | None = None
        self.words_since_key = 0
        self.insecure = False


_STATE = _State()


def _fresh_secure() -> np.random.Generator:
    key = int.from_bytes(os.urandom(16), "little")
    return np.random.Generator(AESCounter(key=key))


def _after_fork_in_child() -> None:
    _STATE.lock = threading.RLock()
    if not _STATE.insecure:
        _STATE.generator = None  # a child never continues its parent's stream


os.register_at_fork(after_in_child=_after_fork_in_child)


def generator(words: int = 0) -> np.random.Generator:
    """The process-wide generator. ``words`` is how many 64-bit words the caller will draw,
    counted towards re-keying."""
    state = _STATE
    with state.lock:
        if state.generator is None or (
            not state.insecure and state.words_since_key + words > _RESEED_AFTER_WORDS
        ):
            state.generator = _fresh_secure()
            state.words_since_key = 0
        state.words_since_key += words
        return state.generator


def random_words(size: int) -> np.ndarray:
    """``size`` independent uniform 64-bit words (uint64)."""
    bit_generator = generator(size).bit_generator
    with bit_generator.lock:
        words: np.ndarray = bit_generator.random_raw(size)
    return words


def discard_words(size: int) -> None:
    """Advance the stream past ``size`` words without materialising them: the stream then
    continues exactly as if ``random_words(size)`` had been called and its result dropped."""
    bit_generator = generator(size).bit_generator
    with bit_generator.lock:
        bit_generator.random_raw(size, output=False)


def random_bytes(size: int) -> np.ndarray:
    """``size`` independent uniform bytes (uint8): the bytes of ⌈size/8⌉ uniform words."""
    words = random_words(-(-size // 8))
    return words.view(np.uint8)[:size]


def is_secure() -> bool:
    """False while :func:`insecure_deterministic_seed` is in force."""
    return not _STATE.insecure


@contextmanager
def insecure_deterministic_seed(seed: int) -> Iterator[None]:
    """FOR TESTS ONLY: make every dpkit draw deterministic inside the ``with`` block.

    Uses numpy's PCG64, which is not cryptographically secure: nothing released inside the block
    is differentially private. Emits :class:`InsecureRandomnessWarning`.
    """
    warnings.warn(
        "dpkit.noise.insecure_deterministic_seed is active: randomness is deterministic and NOT "
        "cryptographically secure; outputs are not differentially private.",
        InsecureRandomnessWarning,
        stacklevel=3,
    )
    state = _STATE
    with state.lock:
        saved = (state.generator, state.words_since_key, state.insecure)
        state.generator = np.random.Generator(np.random.PCG64(seed))
        state.insecure = True
    try:
        yield
    finally:
        with state.lock:
            state.generator, state.words_since_key, state.insecure = saved
