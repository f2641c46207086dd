"""Counter-based random numbers: reproducible from (seed, epoch, index, attempt) alone, whatever
the workers, batching or order that asks for them."""

from __future__ import annotations

import numpy as np

_M64 = (1 << 64) - 1


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64's finaliser, vectorised (a bijection of uint64)."""
    x = x + np.uint64(0x9E3779B97F4A7C15)
    x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return x ^ (x >> np.uint64(31))


def _mix_int(x: int) -> int:
    """``_mix`` of one number, in Python ints (numpy's per-call overhead dwarfs the work here)."""
    x = (x + 0x9E3779B97F4A7C15) & _M64
    x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & _M64
    x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & _M64
    return x ^ (x >> 31)


def uniform(seed: int, epoch: int, indices: np.ndarray, attempt: int) -> np.ndarray:
    """Floats in [0, 1) that depend on (seed, epoch, index, attempt) only."""
    key = _mix_int(_mix_int(_mix_int(seed & _M64) ^ (epoch & _M64)) ^ attempt)
    x = _mix(indices.astype(np.uint64) ^ np.uint64(key))
    return (x >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


def below(u: np.ndarray, n: np.ndarray | int) -> np.ndarray:
    return np.minimum((u * n).astype(np.int64), np.asarray(n, dtype=np.int64) - 1)
