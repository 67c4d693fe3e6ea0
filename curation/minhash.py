"""MinHash signatures and LSH banding, for proposing near-duplicate candidates quickly.

The signature of a shingle set is, for each of num_perm hash functions h_i(x) = (a_i x + b_i)
mod p, the minimum over the set; two sets agree on one signature slot with probability equal to
their Jaccard similarity. LSH cuts the signature into bands of r slots: sets that agree on a
whole band become candidates. The caller then checks candidates with the exact Jaccard, so
banding only has to avoid missing pairs, and we pick r for high recall at the threshold.
"""

import hashlib

import numpy as np

_MERSENNE_PRIME = (1 << 61) - 1
_MAX_HASH = (1 << 32) - 1


def shingle_hashes(shingles: set[tuple[str, ...]]) -> np.ndarray:
    """32-bit hashes of token shingles, shape (num_shingles,), dtype uint64.

    blake2b rather than hash(): Python's str hash changes per process (PYTHONHASHSEED).
    Tokens are joined with a unit separator so ("ab", "c") and ("a", "bc") differ.
    """
    values = [
        int.from_bytes(hashlib.blake2b("\x1f".join(shingle).encode("utf-8"), digest_size=4).digest(), "little")
        for shingle in sorted(shingles)
    ]
    return np.array(values, dtype=np.uint64)


def minhash_permutations(num_perm: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients (a, b), each shape (num_perm,) uint64, drawn below 2**32.

    Keeping a, b and the 32-bit shingle hashes x below 2**32 keeps a*x + b below 2**64, so the
    uint64 arithmetic is exact before the reduction mod the Mersenne prime 2**61 - 1.
    """
    rng = np.random.default_rng(seed)
    a = rng.integers(1, _MAX_HASH, size=num_perm, dtype=np.uint64, endpoint=True)
    b = rng.integers(0, _MAX_HASH, size=num_perm, dtype=np.uint64, endpoint=True)
    return a, b


def minhash_signature(hashes: np.ndarray, permutations: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """Signature of one shingle set, shape (num_perm,) uint64; all slots max for an empty set."""
    a, b = permutations
    if hashes.size == 0:
        return np.full(a.shape, _MAX_HASH, dtype=np.uint64)
    # (num_shingles, 1) x (1, num_perm) -> (num_shingles, num_perm), min over shingles.
    permuted = ((hashes[:, None] * a[None, :] + b[None, :]) % np.uint64(_MERSENNE_PRIME)) & np.uint64(_MAX_HASH)
    return permuted.min(axis=0)


def lsh_rows_per_band(num_perm: int, threshold: float, min_recall: float = 0.99) -> int:
    """The largest band width r (a divisor of num_perm) that still makes a pair with Jaccard
    `threshold` a candidate with probability >= min_recall: 1 - (1 - t**r) ** (num_perm / r).

    Larger r means fewer false candidates to check; r = 1 (any shared slot) is the fallback.
    """
    best = 1
    for rows in range(1, num_perm + 1):
        if num_perm % rows == 0 and 1 - (1 - threshold**rows) ** (num_perm // rows) >= min_recall:
            best = rows
    return best


def band_keys(signature: np.ndarray, rows_per_band: int) -> list[tuple[int, bytes]]:
    """One hashable key per band: (band index, the band's slots as bytes)."""
    return [
        (band, signature[start : start + rows_per_band].tobytes())
        for band, start in enumerate(range(0, signature.size, rows_per_band))
    ]
