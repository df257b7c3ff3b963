"""Every secure generator is keyed afresh from the OS: no two draw the same stream.

AES-CTR output is a pure function of (key, counter). If the key were a constant (or derived
from anything predictable), every process would release the same noise and an observer who
knows the stream could subtract it. These tests fail on a constant key:

* two fresh Python processes draw different first words;
* in one process, two generators built by the secure constructor, two generators obtained
  through the public path after the process-wide one is dropped, and the generator that replaces
  a worn-out key (after 2^32 words) all draw different streams.

(The fork test in ``test_noise.py`` does not catch a constant key: the parent has already moved
along its stream, so the child's fresh stream differs from the parent's next words anyway.)
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dpkit
from dpkit.noise import _rng, generator, is_secure, random_words

WORDS = 8
_DRAW = (
    "from dpkit.noise import is_secure, random_words; "
    "assert is_secure(); print(' '.join(str(w) for w in random_words(8).tolist()))"
)


def _fresh_process_words() -> tuple[int, ...]:
    src = str(Path(dpkit.__file__).resolve().parents[1])  # this checkout's dpkit
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([src, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run(
        [sys.executable, "-c", _DRAW], env=env, capture_output=True, text=True, check=True
    )
    return tuple(int(w) for w in out.stdout.split())


def test_two_fresh_processes_draw_different_streams() -> None:
    first, second = _fresh_process_words(), _fresh_process_words()
    assert len(first) == len(second) == WORDS
    assert first != second, "two processes drew the same AES-CTR stream: the key is not fresh"


def test_two_fresh_generators_draw_different_streams() -> None:
    a = _rng._fresh_secure().bit_generator.random_raw(WORDS)
    b = _rng._fresh_secure().bit_generator.random_raw(WORDS)
    assert type(_rng._fresh_secure().bit_generator).__name__ == "AESCounter"
    assert not np.array_equal(a, b)


def test_the_public_generator_is_rekeyed_when_dropped(monkeypatch: pytest.MonkeyPatch) -> None:
    assert is_secure()
    monkeypatch.setattr(_rng._STATE, "generator", None)
    first = random_words(WORDS)
    monkeypatch.setattr(_rng._STATE, "generator", None)
    second = random_words(WORDS)
    assert not np.array_equal(first, second)


def test_a_worn_key_is_replaced_by_a_fresh_one(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_rng._STATE, "generator", None)
    old = generator()
    start = old.bit_generator.random_raw(WORDS)  # the old key's first words
    monkeypatch.setattr(_rng._STATE, "words_since_key", _rng._RESEED_AFTER_WORDS)
    new = generator(1)
    assert new is not old
    assert not np.array_equal(new.bit_generator.random_raw(WORDS), start)
