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
    mixed: np.ndarray = x ^ (x >> np.uint64(31))
    return mixed


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


def permute(values: np.ndarray, n: int, seed: int, epoch: int) -> np.ndarray:
    """The images of ``values`` (in ``[0, n)``) under a pseudo-random permutation of ``[0, n)``
    that depends on ``(seed, epoch)`` only: computed value by value (a 4-round Feistel network
    over the smallest even number of bits that holds ``n``, walked until it lands below ``n``),
    so any block of the permutation costs its own size, never ``n``."""
    values = np.asarray(values, dtype=np.uint64)
    if n <= 1 or values.size == 0:
        return values.astype(np.int64)
    half = max(1, ((n - 1).bit_length() + 1) // 2)
    mask = np.uint64((1 << half) - 1)
    base = _mix_int(_mix_int(seed & _M64) ^ (epoch & _M64) ^ 0x5045524D)  # "PERM"
    keys = [np.uint64(_mix_int(base ^ r)) for r in range(4)]
    shift = np.uint64(half)

    def rounds(x: np.ndarray) -> np.ndarray:
        left, right = x >> shift, x & mask
        for key in keys:
            left, right = right, left ^ (_mix(right ^ key) & mask)
        return (left << shift) | right

    out = rounds(values)
    outside = out >= n
    while outside.any():  # cycle walking: a bijection of [0, 4^half) restricted to [0, n)
        out[outside] = rounds(out[outside])
        outside = out >= n
    return out.astype(np.int64)
