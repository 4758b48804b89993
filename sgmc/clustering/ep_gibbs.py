"""EP approximate collapsed Gibbs sampling of cluster assignments (Aicher thesis, ch. 5, App. C.3).

A collapsed Gibbs sampler draws ``z_i`` from ``p(z_i | z_-i) F(z_i)`` with the cluster parameters
integrated out: ``F_k = int p(y_i | theta_k) p(theta_k | y_-i, z_-i) dtheta_k`` (thesis Eq. 5.1). When
that integral is intractable, the sampler of Eq. 5.2 replaces the exact conditional posterior by an
expectation-propagation approximation ``q_k(theta) = p_0(theta) prod_{j: z_j = k} f~_j(theta)``, an
exponential family with one site term ``f~_j`` per datum. One site update (App. C.3, steps 2-6):

1. cavity ``q_k / f~_i`` for the current cluster of ``i`` (natural parameters subtracted), ``q_k``
   for every other cluster;
2. ``F~_k = int p(y_i | theta) q_k^{(-i)}(theta) dtheta`` for every ``k`` (the model's job);
3. ``z_i`` drawn from ``(n_{-i,k} + alpha) F~_k``: the symmetric Dirichlet(alpha) prior on the mixture
   weights is collapsed exactly;
4. the new site ``f~_i = proj[q_{z_i}^{(-i)} p(y_i | .)] / q_{z_i}^{(-i)}`` (moment matching);
5. only the old and the new cluster approximations change.

The sites of the other members of a cluster were matched against earlier cavities; for a
non-Gaussian likelihood they can combine into an improper cavity (a Student-t site may lower the
NIW's ``Psi``). Such a datum is not skipped, which would freeze it and, when every member's cavity is
improper, its whole cluster: the cavity is rebuilt from the prior by re-matching the other members'
sites one at a time (:func:`refresh_cavity`), the local form of the thesis's full EP update.

:func:`ep_sweep` does optional full EP passes without resampling, vectorised over all sites (parallel
EP: every cavity from the current ``q``). A model supplies ``prior(K)``, ``log_predictive(cav, i)``
(arrays with a leading cluster axis), ``tilted_site(cav, idx)`` (a leading site axis), optionally
``predict_and_match(cav, i)`` (``log F~`` and a function of the drawn cluster giving the new site,
sharing the work of the two),
``proper(q)`` (which approximations are proper distributions) and its data size ``n_data``; see :class:`~sgmc.clustering.timeseries.TimeSeriesClusterModel` and
:class:`~sgmc.clustering.student_t.StudentTMixtureModel`. When every site is exactly in the family
(Gaussian likelihoods under a normal-inverse-Wishart family, or independent time steps in the time
series model), EP is exact and the sampler is the exact collapsed Gibbs sampler, which leaves
``p(z | y)`` invariant; otherwise it targets the EP approximation of it.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from .._array_api import Array, array_namespace
from .._sampling import categorical
from .._validation import check_int, check_positive

__all__ = ["EPGibbsState", "ep_init", "ep_step", "ep_sweep", "ep_gibbs_sweep", "refresh_cavity", "collapsed_log_prior",
           "draw_from_logits", "check_assignments", "log_normaliser", "onehot"]


class EPGibbsState(NamedTuple):
    """Assignments, cluster counts, cluster approximations ``q`` and site terms, all arrays.

    Attributes
    ----------
    z : int array (N,)
    counts : float array (K,)
    q : tuple of arrays, each (K, ...)
        Natural parameters of every cluster approximation (prior plus its sites).
    sites : tuple of arrays, each (N, ...)
        Natural parameters of every site term.
    skipped : int
        Site updates skipped so far because the datum's cavity was not a proper distribution (with
        ``refresh="never"``, or when even a refreshed cavity is improper).
    refreshed : int
        Cavities rebuilt from the prior (:func:`refresh_cavity`) because the stored one was improper.
    """

    z: Array
    counts: Array
    q: tuple
    sites: tuple
    skipped: int = 0
    refreshed: int = 0


def check_assignments(xp: Any, z: Any, n: int, K: int, device: Any = None) -> Array:
    """``z`` as an int64 array (n,) with values in ``0..K-1``, or a ``ValueError`` naming it."""
    z = xp.asarray(z, device=device)
    if z.ndim != 1 or z.shape[0] != n:
        msg = f"`z` must be an integer array of shape ({n},), one cluster per datum; got shape {tuple(z.shape)}"
        raise ValueError(msg)
    if z.dtype not in (xp.int64, xp.int32, xp.int16, xp.int8, xp.uint8):
        msg = f"`z` must hold integers; got dtype {z.dtype}"
        raise TypeError(msg)
    if n and (bool(xp.any(z < 0)) or bool(xp.any(z >= K))):
        msg = f"`z` must hold cluster labels in 0..{K - 1} (K = {K}); got values outside"
        raise ValueError(msg)
    return xp.astype(z, xp.int64)


def onehot(xp: Any, z: Array, K: int, dtype: Any) -> Array:
    """Indicators (..., K) of labels ``z``."""
    return xp.astype(z[..., None] == xp.arange(K, device=z.device), dtype)


def collapsed_log_prior(xp: Any, counts: Array, alpha: float) -> Array:
    """``log p(z_i = k | z_-i)`` up to a constant: ``log(n_{-i,k} + alpha)`` (Dirichlet(alpha) collapsed)."""
    return xp.log(counts + alpha)


def draw_from_logits(rng: Any, logits: Array, xp: Any = None) -> Array:
    """One categorical draw (as a (1,) int64 array) from unnormalised log-probabilities (K,)."""
    xp = array_namespace(logits) if xp is None else xp
    w = xp.exp(logits - xp.max(logits))
    u = rng.uniform((1,), dtype=logits.dtype)
    return categorical(u, xp.cumulative_sum(w))


def _scatter_sum(xp, z, K, sites):
    """``sum_{j: z_j = k} site_j`` for every k, as a tuple of arrays (K, ...)."""
    oh = onehot(xp, z, K, sites[0].dtype)  # (N, K)
    out = []
    for s in sites:
        flat = xp.reshape(s, (s.shape[0], -1))
        out.append(xp.reshape(xp.matrix_transpose(oh) @ flat, (K,) + tuple(s.shape[1:])))
    return tuple(out)


def _assemble(xp, model, z, K, sites):
    prior = model.prior(K)
    summed = _scatter_sum(xp, z, K, sites)
    return tuple(p + s for p, s in zip(prior, summed))


def ep_sweep(model: Any, state: EPGibbsState, damping: float = 1.0) -> EPGibbsState:
    """One full (parallel) EP pass over all sites at fixed ``z``, vectorised over the sites.

    Every site's cavity is its cluster's ``q`` with that site removed; all new sites are matched at
    once and the cluster approximations rebuilt from the prior and the sites. ``damping`` in (0, 1]
    mixes the new sites' natural parameters with the old ones.
    """
    damping = check_positive(damping, "damping")
    if damping > 1.0:
        msg = f"`damping` must be in (0, 1]; got {damping}"
        raise ValueError(msg)
    xp = array_namespace(state.z)
    K = state.counts.shape[0]
    own = tuple(xp.take(q, state.z, axis=0) for q in state.q)
    cav = tuple(q - s for q, s in zip(own, state.sites))
    ok = model.proper(cav)  # sites whose cavity is improper keep their old value
    okb = tuple(xp.reshape(ok, (-1,) + (1,) * (c.ndim - 1)) for c in cav)
    # an improper cavity is not handed to the model (its predictive has no density): its row is
    # matched against the cluster's proper q instead, and the result discarded
    cav = tuple(xp.where(b, c, o) for b, c, o in zip(okb, cav, own))
    new = model.tilted_site(cav, xp.arange(state.z.shape[0], device=state.z.device))
    new = tuple(xp.where(b, n, s) for b, n, s in zip(okb, new, state.sites))
    sites = tuple(damping * n + (1.0 - damping) * s for n, s in zip(new, state.sites))
    q = _assemble(xp, model, state.z, K, sites)
    good = model.proper(q)  # clusters the pass would make improper keep their old sites and q
    if not bool(xp.all(good)):
        keep = xp.take(good, state.z, axis=0)
        sites = tuple(xp.where(xp.reshape(keep, (-1,) + (1,) * (n.ndim - 1)), n, s) for n, s in zip(sites, state.sites))
        q = _assemble(xp, model, state.z, K, sites)
    return state._replace(sites=sites, q=q)


def _site_update(xp, model, state, i):
    """Re-match site ``i`` in its current cluster (no resampling); skipped if its cavity is improper."""
    K = state.counts.shape[0]
    old = state.z[i : i + 1]
    e = xp.reshape(onehot(xp, old, K, state.counts.dtype), (K,))
    cav_k = tuple(xp.take(q, old, axis=0) - s[i : i + 1, ...] for q, s in zip(state.q, state.sites))
    if not bool(model.proper(cav_k)[0]):
        return state._replace(skipped=state.skipped + 1)
    site = model.tilted_site(cav_k, xp.asarray([i], device=state.z.device))
    q = tuple(qq + xp.reshape(e, (K,) + (1,) * (qq.ndim - 1)) * (c + s - qk)
              for qq, c, s, qk in zip(state.q, cav_k, site, (xp.take(q, old, axis=0) for q in state.q)))
    sel = xp.arange(state.z.shape[0], device=state.z.device) == i
    sites = tuple(xp.where(xp.reshape(sel, (-1,) + (1,) * (s.ndim - 1)), n, s) for s, n in zip(state.sites, site))
    return state._replace(q=q, sites=sites)


def refresh_cavity(model: Any, state: EPGibbsState, i: int) -> EPGibbsState:
    """Rebuild the sites of the other members of ``i``'s cluster by one sequential pass from the prior.

    The cavity ``q_k / f~_i`` is a product of sites matched against earlier cavities, when the cluster
    had other members; a Student-t site can carry a negative contribution to ``Psi`` (an outlier widens
    the tilted distribution), and once those members have left, the stale sites of the rest need not
    combine with the prior into a proper NIW. Adding the members ``j != i`` one at a time from the
    prior (assumed density filtering, as :func:`ep_init` does) re-matches each site against a proper
    cavity, so every intermediate approximation and the resulting cavity of ``i`` are proper
    moment-matched NIWs (thesis 5.2.1: the sites of the clusters whose membership changed are updated).
    Site ``i`` is kept, so ``q_k`` is the rebuilt cavity times it. Returns a new state (the
    caller's arrays are not written) with ``refreshed`` one higher.

    >>> import numpy as np
    >>> from sgmc.clustering import StudentTMixtureModel, ep_init, refresh_cavity
    >>> model = StudentTMixtureModel(np.array([[0.0, 0.0], [0.5, 0.1], [4.0, 4.0]]), nu=5.0)
    >>> refresh_cavity(model, ep_init(model, np.array([0, 0, 1]), 2), 0).refreshed
    1
    """
    xp = model.xp
    K = state.counts.shape[0]
    kk = state.z[i : i + 1]
    ar = xp.arange(state.z.shape[0], device=state.z.device)
    members = xp.nonzero((state.z == kk) & (ar != i))[0]  # in index order
    cur = tuple(xp.take(p, kk, axis=0) for p in model.prior(K))
    sites = state.sites
    for m in range(members.shape[0]):
        j = members[m : m + 1]
        site = model.tilted_site(cur, j)
        cur = tuple(c + s for c, s in zip(cur, site))
        sel = ar == j
        sites = tuple(xp.where(xp.reshape(sel, (-1,) + (1,) * (s.ndim - 1)), n, s) for s, n in zip(sites, site))
    e = xp.arange(K, device=state.z.device) == kk
    q = tuple(xp.where(xp.reshape(e, (K,) + (1,) * (qq.ndim - 1)), c + s[i : i + 1, ...], qq)
              for qq, c, s in zip(state.q, cur, sites))
    return state._replace(q=q, sites=sites, refreshed=state.refreshed + 1)


def ep_init(model: Any, z: Any, K: int, passes: int = 1) -> EPGibbsState:
    """EP state for assignments ``z``: one sequential pass adding the data one at a time (assumed
    density filtering, so every intermediate approximation is a proper moment-matched one), then
    ``passes - 1`` parallel EP passes.

    Parameters
    ----------
    model : clustering model
        :class:`~sgmc.clustering.timeseries.TimeSeriesClusterModel` or
        :class:`~sgmc.clustering.student_t.StudentTMixtureModel`.
    z : int array (N,)
        Initial cluster labels in ``0..K-1``.
    K : int
        Number of clusters, at least 1.
    passes : int
        Passes over the data (at least 1): the first sequential, the others parallel.
    """
    K = check_int(K, "K", minimum=1)
    passes = check_int(passes, "passes", minimum=1)
    xp = model.xp
    z = check_assignments(xp, z, model.n_data, K, device=model.device)
    prior = model.prior(K)
    sites = tuple(xp.zeros((model.n_data,) + tuple(p.shape[1:]), dtype=p.dtype, device=model.device) for p in prior)
    counts = xp.sum(onehot(xp, z, K, prior[0].dtype), axis=0)
    state = EPGibbsState(z, counts, _assemble(xp, model, z, K, sites), sites)
    for i in range(model.n_data):
        state = _site_update(xp, model, state, i)
    for _ in range(passes - 1):
        state = ep_sweep(model, state)
    return state


REFRESH = ("improper", "never")


def check_refresh(refresh: Any) -> str:
    """``refresh`` as one of :data:`REFRESH`, or a ``ValueError`` naming it."""
    if not (isinstance(refresh, str) and refresh in REFRESH):
        msg = f"`refresh` must be one of {REFRESH}; got {refresh!r}"
        raise ValueError(msg)
    return refresh


def _cavities(xp, state, i, K):
    old = state.z[i : i + 1]
    e_old = onehot(xp, old, K, state.counts.dtype)  # (1, K)
    cav = tuple(q - xp.reshape(e_old, (K,) + (1,) * (q.ndim - 1)) * s[i : i + 1, ...] for q, s in zip(state.q, state.sites))
    return old, e_old, cav


def ep_step(rng: Any, model: Any, state: EPGibbsState, i: int, alpha: float, *, refresh: str = "improper",
            _inplace: bool = False) -> tuple[EPGibbsState, Array]:
    """Resample ``z_i`` by the EP approximate collapsed conditional and update its site (steps 1-5).

    Returns the new state and the log conditional probabilities (K,) the draw used (normalised).
    When the cavity of ``i``'s cluster is not a proper distribution (stale sites of a non-Gaussian
    model can do that), ``refresh="improper"`` (the default) rebuilds it from the prior with the
    cluster's other sites re-matched (:func:`refresh_cavity`; ``refreshed`` grows by one) and goes on.
    With ``refresh="never"``, or if the rebuilt cavity is still improper, ``z_i`` and its site are left
    as they are, the state's ``skipped`` count grows by one and the log probabilities are NaN.
    """
    refresh = check_refresh(refresh)
    xp = model.xp
    K = state.counts.shape[0]
    dtype = state.counts.dtype
    old, e_old, cav = _cavities(xp, state, i, K)
    if not bool(model.proper(tuple(xp.take(c, old, axis=0) for c in cav))[0]):
        if refresh == "improper":
            state = refresh_cavity(model, state, i)
            old, e_old, cav = _cavities(xp, state, i, K)
        if refresh == "never" or not bool(model.proper(tuple(xp.take(c, old, axis=0) for c in cav))[0]):
            return state._replace(skipped=state.skipped + 1), xp.full((K,), xp.nan, dtype=dtype, device=state.z.device)
    counts = state.counts - e_old[0, :]
    if hasattr(model, "predict_and_match"):  # one pass serves F~ and the site of the drawn cluster
        log_f, match = model.predict_and_match(cav, i)
    else:
        log_f = model.log_predictive(cav, i)
        match = lambda k: model.tilted_site(tuple(xp.take(c, k, axis=0) for c in cav),  # noqa: E731
                                            xp.asarray([i], device=state.z.device))
    logits = collapsed_log_prior(xp, counts, alpha) + log_f
    new = draw_from_logits(rng, logits, xp)
    site = match(new)
    e_new = onehot(xp, new, K, dtype)
    q = tuple(c + xp.reshape(e_new, (K,) + (1,) * (c.ndim - 1)) * s for c, s in zip(cav, site))
    if _inplace:  # the sweep owns copies of z and the sites: write row i, O(T) instead of O(N T)
        for s, n in zip(state.sites, site):
            s[i, ...] = n[0, ...]
        state.z[i] = new[0]
        sites, z = state.sites, state.z
    else:
        sel = xp.reshape(xp.arange(state.z.shape[0], device=state.z.device) == i, (-1,))
        sites = tuple(xp.where(xp.reshape(sel, (-1,) + (1,) * (s.ndim - 1)), n, s) for s, n in zip(state.sites, site))
        z = xp.where(sel, new, state.z)
    return (EPGibbsState(z, counts + e_new[0, :], q, sites, state.skipped, state.refreshed),
            logits - log_normaliser(xp, logits))


def ep_gibbs_sweep(rng: Any, model: Any, state: EPGibbsState, alpha: float = 1.0, *,
                   full_ep: int = 0, order: Any = None, refresh: str = "improper") -> EPGibbsState:
    """One Gibbs sweep over all sites (steps 1-5 each), then ``full_ep`` parallel EP passes (step 6).

    Parameters
    ----------
    rng : backend generator
        From :func:`sgmc.backends.default_rng`.
    model : clustering model
    state : EPGibbsState
    alpha : float
        Concentration of the symmetric Dirichlet prior on the mixture weights (each component), > 0.
    full_ep : int
        Number of full EP passes without resampling after the sweep (the thesis found 0 sufficient).
    order : sequence of int, optional
        Site order (default ``0..N-1``).
    refresh : {"improper", "never"}
        What a step does when the datum's cavity is improper: rebuild it from the prior
        (:func:`refresh_cavity`) or skip the datum (see :func:`ep_step`).

    Returns
    -------
    EPGibbsState
    """
    alpha = check_positive(alpha, "alpha")
    full_ep = check_int(full_ep, "full_ep", minimum=0)
    refresh = check_refresh(refresh)
    n = state.z.shape[0]
    xp = array_namespace(state.z)
    # private copies that the steps update row by row (the caller's state is left as it was)
    state = state._replace(z=xp.asarray(state.z, copy=True), sites=tuple(xp.asarray(s, copy=True) for s in state.sites))
    for i in (range(n) if order is None else order):
        state, _ = ep_step(rng, model, state, int(i), alpha, refresh=refresh, _inplace=True)
    for _ in range(full_ep):
        state = ep_sweep(model, state)
    return state


def log_normaliser(xp: Any, logits: Array) -> Array:
    """``log sum exp`` of a 1-D array."""
    m = xp.max(logits)
    return m + xp.log(xp.sum(xp.exp(logits - m)))

