"""Kernel Stein discrepancy (KSD) with the inverse multiquadric kernel, computed in blocks.

The KSD measures how far a sample theta_1..theta_n is from a target pi using only the scores
grad log pi(theta_k), which may be exact or unbiased stochastic estimates (Gorham and Mackey 2017;
Nemeth and Fearnhead 2021, section 4, eq. 13). With the IMQ kernel
k(x, y) = (c^2 + (x-y)^T Lambda^{-1} (x-y))^beta, c > 0 and beta in (-1, 0), it converges to zero if and
only if the sample converges to pi. ``kind="sum"`` is the review's eq. (13),
sum_j sqrt(sum_{k,k'} k0_j(theta_k, theta_k') / n^2); ``kind="joint"`` is the usual
sqrt(sum_{k,k'} sum_j k0_j(theta_k, theta_k')) / n (Riabiz et al. 2022). Both are V-statistics.
Because the Stein kernel of one kernel k is a sum over coordinates, k0 = sum_j k0_j, the squared
``"joint"`` KSD is the sum of the squared per-coordinate terms that ``"sum"`` adds after square roots.

``kind="per_coordinate"`` (and :func:`ksd_by_variable` for blocks of coordinates) reports one KSD per
variable as the state space model papers' tables do (Aicher et al. 2019, supplement; log10 KSD per
variable plus TOTAL): each variable's KSD is the joint IMQ KSD of that variable's draws with that
variable's part of the score, its kernel measuring distances in that variable's coordinates only, and
TOTAL is the sum of the variables' KSDs. (This is not the KSD of the variable's marginal law, whose
score is a conditional expectation of the joint score; it is the diagnostic those tables report.)
Equation (13) prints grad U where the Langevin Stein operator needs grad log pi = -grad U; ``scores``
here are grad log pi.

Cost: O(n^2 d) time, with the pairwise quantities as matrix products over tiles of
``block x chunk`` pairs, and O(block * chunk + n d) memory.
"""

from __future__ import annotations

import operator
from typing import Any, NamedTuple, Sequence

from .._array_api import Array, device_of, is_array
from . import _stein

__all__ = ["ksd", "cumulative_ksd", "ksd_preconditioner", "ksd_by_variable", "KSDByVariable"]


def _on_backend(backend: Any, *arrays: Any) -> tuple:
    """The explicit ``backend=`` move of array inputs (other values pass through)."""
    from .. import backends

    return tuple(backends.move(a, backend) if is_array(a) else a for a in arrays)


# ksd and cumulative_ksd repeat one keyword signature and its help: each public function stands alone.
def ksd(
    samples: Array,
    scores: Array,
    *,
    c: float = 1.0,
    beta: float = -0.5,
    kind: str = "sum",
    preconditioner: Any = None,
    block: int | None = None,
    backend: Any = None,
) -> Array:
    """Kernel Stein discrepancy of a sample with the IMQ kernel (a V-statistic).

    Parameters
    ----------
    samples : array, shape (n, d) or (chains, n, d)
        The points; chains are pooled.
    scores : array, same shape
        grad log pi at each point (exact or an unbiased estimate). Note the sign: the review's eq. (13)
        writes grad U = -grad log pi.
    c : float, default 1.0
        Kernel offset in the review's convention (c^2 + r^2)^beta. The stein-thinning package writes
        (c + r^2)^beta; both agree at c = 1.
    beta : float, default -0.5
        Kernel exponent, negative. Values in (-1, 0) give convergence control; beta <= -1 is accepted
        with a ``UserWarning``. beta = -1/2 has a faster path (one square root per pair).
    kind : {"sum", "joint", "per_coordinate"}, default "sum"
        ``"sum"``: the review's eq. (13), a sum over coordinates of per-coordinate discrepancies.
        ``"joint"``: one square root of the sum over coordinates (stein-thinning's KSD).
        ``"per_coordinate"``: :func:`ksd_by_variable` with one variable per coordinate; returns a
        :class:`KSDByVariable` (each coordinate's KSD and the TOTAL).
    preconditioner : None, str or array, optional
        Lambda in the kernel: ``None`` or ``"id"`` (identity); ``"med"`` (Lambda = ell^2 I with ell the
        median pairwise distance, on an equispaced subsample of at most 1000 points); ``"sclmed"``
        (Lambda = ell^2 / log(min(n, 1000)) I); ``"smpcov"`` (the sample covariance); a (d, d) symmetric
        positive definite array; or a positive (d,) array, the diagonal of Lambda. The sample-dependent
        choices make the kernel depend on the sample: to compare samples, compute Lambda once with
        :func:`ksd_preconditioner` and pass it to every call.
    block : int, optional
        Rows per block (default 128). Tiles are ``block x max(block, 32768 // block)`` pairs, so
        memory is O(block * max(block, 32768 / block) + n d). The value changes only rounding.
    backend : str or Backend, optional
        Compute on this backend: ``samples``, ``scores`` (and an array ``preconditioner``) are
        copied there first (:func:`sgmc.backends.move`). On ``"cupy"`` the pair sums run in a CUDA
        kernel. By default the inputs decide.

    Returns
    -------
    array, shape ()
        The KSD, in the input's namespace, device and floating dtype (pair sums are accumulated in
        float64 where the backend offers it).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics import ksd
    >>> x = np.random.default_rng(0).standard_normal((2000, 2))   # draws from N(0, I)
    >>> float(ksd(x, -x)) < float(ksd(x + 1.0, -(x + 1.0)))        # scores of N(0, I) are -x
    True
    """
    if isinstance(kind, str) and kind == "per_coordinate":
        return ksd_by_variable(samples, scores, c=c, beta=beta, preconditioner=preconditioner, block=block)
    c, beta = _stein.check_c_beta(c, beta)
    kind = _stein.check_kind(kind)
    if backend is not None:
        samples, scores = _on_backend(backend, samples, scores)
        if is_array(preconditioner):
            preconditioner = _on_backend(backend, preconditioner)[0]
    xp, x, s, _ = _stein.prepare_inputs(samples, scores, chains_first=True)
    n = int(x.shape[0])
    blk = _stein.check_block(block, n)
    pre = _stein.resolve_preconditioner(xp, x, preconditioner)
    st = _stein.make_stein(xp, x, s, pre, c, beta, kind)
    total = _stein.row_sums(xp, st, blk, "upper")
    total = xp.clip(total, min=0.0)
    value = xp.sqrt(total) / n
    if kind == "sum":
        value = xp.sum(value)
    # NumPy turns 0-d results into scalars; hand back a 0-d array
    return xp.asarray(xp.astype(value, x.dtype), device=device_of(x))


# ksd and cumulative_ksd repeat one keyword signature and its help: each public function stands alone.
def cumulative_ksd(
    samples: Array,
    scores: Array,
    *,
    c: float = 1.0,
    beta: float = -0.5,
    kind: str = "sum",
    preconditioner: Any = None,
    block: int | None = None,
) -> Array:
    """KSD of the first k points for every k = 1..n, in one O(n^2 d) pass.

    Each block of rows is evaluated against the columns before it (the lower triangle), giving the
    row sums r_i = k0(i, i) + 2 sum_{j<i} k0(i, j); their cumulative sums are the prefix V-statistics.
    Memory is O(block * chunk + n d).

    Parameters
    ----------
    samples, scores : array, shape (n, d) or (chains, n, d)
        For (chains, n, d) input the k-th value uses the first k iterations of every chain.
    c, beta, kind, preconditioner, block
        As in :func:`ksd`. A sample-dependent preconditioner is computed once from the whole sample.

    Returns
    -------
    array, shape (n,)
        ``out[k-1]`` equals ``ksd`` of the first k points (up to rounding).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics import cumulative_ksd
    >>> x = np.random.default_rng(1).standard_normal((500, 3))
    >>> path = cumulative_ksd(x, -x, kind="joint")
    >>> path.shape, bool(path[-1] < path[9])
    ((500,), True)
    """
    c, beta = _stein.check_c_beta(c, beta)
    kind = _stein.check_kind(kind)
    xp, x, s, chains = _stein.prepare_inputs(samples, scores, chains_first=False)
    n = int(x.shape[0])
    blk = _stein.check_block(block, n)
    pre = _stein.resolve_preconditioner(xp, x, preconditioner)
    st = _stein.make_stein(xp, x, s, pre, c, beta, kind)
    rows = _stein.row_sums(xp, st, blk, "lower")
    prefix = xp.clip(xp.cumulative_sum(rows, axis=0), min=0.0)
    count = xp.arange(1, n + 1, dtype=prefix.dtype, device=device_of(prefix))
    if kind == "sum":
        value = xp.sum(xp.sqrt(prefix), axis=1) / count
    else:
        value = xp.sqrt(prefix) / count
    if chains > 1:
        value = value[chains - 1 :: chains]
    return xp.astype(value, x.dtype)


def ksd_preconditioner(samples: Array, kind: str = "med") -> Array:
    """The matrix Lambda that :func:`ksd` uses for ``preconditioner=kind`` on ``samples``.

    Parameters
    ----------
    samples : array, shape (n, d) or (chains, n, d)
    kind : {"id", "med", "sclmed", "smpcov"}, default "med"
        ``"med"``: Lambda = ell^2 I with ell the median distance between distinct pairs of an
        equispaced subsample of at most 1000 points (rows floor(i (n-1)/999)); exact for n <= 1000.
        ``"sclmed"``: Lambda = ell^2 / log(min(n, 1000)) I. ``"smpcov"``: the sample covariance
        (denominator n - 1). These follow Riabiz et al. (2022), whose stein-thinning package returns
        Lambda^{-1}.

    Returns
    -------
    array, shape (d, d)
        Pass it as ``preconditioner=`` to compare several samples with one kernel.

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics import ksd, ksd_preconditioner
    >>> x = np.random.default_rng(2).standard_normal((300, 2))
    >>> lam = ksd_preconditioner(x, "med")
    >>> bool(abs(float(ksd(x, -x, preconditioner=lam)) - float(ksd(x, -x, preconditioner="med"))) < 1e-12)
    True
    """
    if not isinstance(kind, str) or kind not in ("id", "med", "sclmed", "smpcov"):
        msg = f"`kind` must be one of 'id', 'med', 'sclmed', 'smpcov'; got {kind!r}"
        raise ValueError(msg)
    xp, x, _, _ = _stein.prepare_inputs(samples, samples, chains_first=True)
    d = int(x.shape[1])
    pre = _stein.resolve_preconditioner(xp, x, kind)
    eye = xp.eye(d, dtype=x.dtype, device=device_of(x))
    if pre.scalar is not None:
        return eye / pre.scalar
    return xp.linalg.inv(pre.matrix)


class KSDByVariable(NamedTuple):
    """Kernel Stein discrepancy per variable.

    Attributes
    ----------
    per_variable : array, shape (n_variables,)
        Each variable's KSD (IMQ kernel on its own coordinates, its own part of the score).
    total : array, shape ()
        The sum over variables (the tables' TOTAL).
    names : list of str
        Variable names.
    """

    per_variable: Array
    total: Array
    names: list

    def log10(self) -> dict:
        """``{name: log10 KSD, ..., "TOTAL": log10 total}`` as Python floats (the tables' layout)."""
        import math

        out = {n: math.log10(float(v)) for n, v in zip(self.names, self.per_variable)}
        out["TOTAL"] = math.log10(float(self.total))
        return out


def ksd_by_variable(
    samples: Array,
    scores: Array,
    groups: Any = None,
    *,
    c: float = 1.0,
    beta: float = -0.5,
    preconditioner: Any = None,
    block: int | None = None,
) -> KSDByVariable:
    """KSD of each variable (a coordinate or a block of coordinates) and their total.

    Parameters
    ----------
    samples, scores : array, shape (n, d) or (chains, n, d)
    groups : None, sequence of int sequences, or dict of name -> int sequence
        The coordinates of each variable. ``None``: every coordinate is a variable (``x[j]``).
    c, beta, block
        As in :func:`ksd`.
    preconditioner : None, str, or array
        Applied within each variable: a string is resolved on the variable's own draws; a (d,) or
        (d, d) array is restricted to the variable's coordinates.

    Returns
    -------
    KSDByVariable
        ``per_variable`` (one KSD each, the ``"joint"`` KSD of the variable's coordinates) and
        ``total`` (their sum).

    Examples
    --------
    >>> import numpy as np
    >>> from sgmc.diagnostics import ksd_by_variable
    >>> x = np.random.default_rng(0).standard_normal((1000, 3))
    >>> x[:, 0] += 1.0                             # only the first variable is off target
    >>> res = ksd_by_variable(x, -(x - np.array([1.0, 0.0, 0.0])) - np.array([1.0, 0.0, 0.0]))
    >>> int(np.argmax(res.per_variable)), res.names
    (0, ['x[0]', 'x[1]', 'x[2]'])
    """
    xp, x, s, _ = _stein.prepare_inputs(samples, scores, chains_first=True)
    d = int(x.shape[1])
    if groups is None:
        names = [f"x[{j}]" for j in range(d)]
        cols = [[j] for j in range(d)]
    else:
        expected = "None, a sequence of coordinate lists or a dict of name -> coordinate list"
        if isinstance(groups, (str, bytes)) or not (isinstance(groups, dict) or hasattr(groups, "__iter__")):
            msg = f"`groups` must be {expected}; got {groups!r:.80}"
            raise TypeError(msg)
        items = list(groups.items()) if isinstance(groups, dict) else [(f"group{i}", g) for i, g in enumerate(groups)]
        names, cols = [], []
        for name, g in items:
            try:
                if isinstance(g, (str, bytes, float)):
                    raise TypeError
                idx = [operator.index(j) for j in (g if isinstance(g, Sequence) or hasattr(g, "__iter__") else [g])]
            except TypeError:
                msg = f"`groups` must be {expected}; entry {name!r} is {g!r:.60}, not coordinate indices"
                raise TypeError(msg) from None
            if not idx or any(j < 0 or j >= d for j in idx):
                msg = f"`groups` entry {name!r} must list coordinates in [0, {d}); got {list(idx)}"
                raise ValueError(msg)
            names.append(str(name))
            cols.append(idx)
    dev = device_of(x)
    values = []
    for idx in cols:
        take = xp.asarray(idx, dtype=xp.int64, device=dev)
        xg = xp.take(x, take, axis=1)
        sg = xp.take(s, take, axis=1)
        pre = preconditioner
        if pre is not None and not isinstance(pre, str):
            pre = xp.take(pre, take, axis=0)
            if pre.ndim == 2:
                pre = xp.take(pre, take, axis=1)
        values.append(ksd(xg, sg, c=c, beta=beta, kind="joint", preconditioner=pre, block=block))
    per = xp.stack(values)
    return KSDByVariable(per, xp.sum(per), names)
