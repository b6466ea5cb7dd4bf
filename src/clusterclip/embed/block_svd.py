"""A randomized SVD of ``[W | S @ H]`` that never forms ``S @ H``: the word block and the n-gram block of the
``subword`` embedders, the n-gram block as word counts times the words' n-gram rows."""

from __future__ import annotations

from typing import Any

import numpy as np
import scipy.sparse as sp


def block_svd(w: sp.csr_matrix, s: sp.csr_matrix, h: sp.csr_matrix, k: int, n_iter: int, seed: int,
               range_block: tuple[sp.csr_matrix, sp.csr_matrix] | None = None,
               gram_dtype: type = np.float64) -> np.ndarray:
    """Top ``k`` right singular vectors of ``A = [W | S @ H]``, never forming ``S @ H`` (Halko et al.: Gaussian
    range, ``n_iter`` power iterations with LU normalisation of the short ``[documents, k + 10]`` side only,
    where scikit-learn's ``randomized_svd`` also normalises the long features' side); signs fixed so each
    vector's largest entry is positive. ``range_block``, ``(S', H')``, stands in for the n-gram block's factors
    in the range finder (fewer words, fewer buckets: a cheaper matrix with about the same leading left singular
    space); the final ``A.T @ Q`` is exact, its Gram matrix and the vectors computed in ``gram_dtype``. Returns
    float32 ``[k, n_words + n_buckets]``."""
    import scipy.linalg as la

    n_rows, n_w, n_c = w.shape[0], w.shape[1], h.shape[1]
    p = min(k + 10, n_rows, n_w + n_c)
    full = _block_ops(w, s, h)
    a_dot, at_dot = full if range_block is None else _block_ops(w, *range_block)
    n_range = n_w + (n_c if range_block is None else range_block[1].shape[1])
    rng = np.random.default_rng(seed)
    q = a_dot(rng.standard_normal((n_range, p), dtype=np.float32))
    for _ in range(n_iter):
        q, _ = la.lu(q, permute_l=True)
        q = a_dot(at_dot(q))
    q, _ = np.linalg.qr(q)
    bt = full[1](q).astype(gram_dtype)
    evals, evecs = np.linalg.eigh(np.asarray(bt.T @ bt, dtype=np.float64))
    order = np.argsort(evals)[::-1][:k]
    sv = np.sqrt(np.maximum(evals[order], 0.0))
    vt = evecs[:, order].astype(gram_dtype).T @ bt.T
    vt /= np.where(sv > 0, sv, 1.0).astype(gram_dtype)[:, None]
    signs = np.sign(vt[np.arange(k), np.argmax(np.abs(vt), axis=1)])
    return (vt * signs[:, None]).astype(np.float32)


def _block_ops(w: sp.csr_matrix, s: sp.csr_matrix, h: sp.csr_matrix) -> tuple[Any, Any]:
    """``q -> A @ q`` and ``y -> A.T @ y`` for ``A = [W | S @ H]`` (float32)."""
    n_w = w.shape[1]
    wt, st, ht = w.T.tocsr(), s.T.tocsr(), h.T.tocsr()

    def a_dot(q: np.ndarray) -> np.ndarray:
        return np.asarray(w @ q[:n_w] + s @ (h @ q[n_w:]), dtype=np.float32)

    def at_dot(y: np.ndarray) -> np.ndarray:
        return np.vstack([np.asarray(wt @ y, dtype=np.float32), np.asarray(ht @ (st @ y), dtype=np.float32)])

    return a_dot, at_dot
