"""State space models: a time series ``y_1..T`` with a latent Markov chain ``x_0..T``.

A state space model (Aicher 2020, thesis Eq. 2.20) has the complete-data density

    p(y, x | theta) = p0(x_0) prod_{t=1}^T p(x_t | x_{t-1}, theta) p(y_t | x_t, theta),

and, by Fisher's identity (thesis Eq. 2.24), the gradient of the log-likelihood is the smoothed
expectation of the complete-data score,

    grad log p(y | theta) = E_{x | y, theta}[ sum_t grad log p(y_t, x_t | x_{t-1}, theta) ].

:class:`StateSpaceModel` is the base the models of :mod:`sgmc.ssm` share. It is a sampling
:class:`~sgmc.models.Target` over an *unconstrained* parameter vector ``theta`` (each model documents
its map :meth:`constrain` to natural parameters), and it adds what the buffered estimator
(:class:`sgmc.ssm.Buffered`) needs: the observations ``y`` of shape ``(T, obs_dim)``, ``T`` and
``n_data = T``, and :meth:`window_score`, the weighted score over buffered subsequences
(:mod:`sgmc.ssm.subsequence`) computed exactly (Kalman smoother, forward-backward) or by a particle
smoother. Models with a tractable likelihood (linear Gaussian, discrete HMM) also give the exact
``log_lik(theta)`` and ``grad_log_lik(theta)`` over the whole series, hence ``log_posterior`` and
``grad_log_posterior``, so the ``"full"`` estimator and the exact samplers work on them.

Initial distribution
--------------------
``p0`` is the distribution of ``x_0``, one step before the first observation. A buffered window that
starts at the first observation uses ``p0``; a window that starts later uses the model's
*stationary* distribution at ``theta`` when it has one (thesis section 3.3: the buffer makes the
gradient insensitive to this choice), treated as fixed (its dependence on ``theta`` is not
differentiated). With ``B >= T`` every window is the whole series and the buffered gradient is the
exact one.
"""

from __future__ import annotations

from typing import Any

from .. import backends
from .._array_api import Array, array_namespace, as_float_array, check_finite, device_of, is_array
from .._blocks import RowSource, check_dtype, check_finite_blocks, is_out_of_core, is_reader
from .._keys import tracing
from .._validation import check_choice, check_int
from ..models.base import Model, _placeholder, as_data_array, provides, require
from ._divergence import STEP_NOTE, guarded
from .subsequence import Windows, gather_windows

__all__ = ["StateSpaceModel", "as_series", "check_theta"]


def check_theta(xp: Any, theta: Array, name: str = "theta") -> bool:
    """Check ``theta`` holds finite values; returns False, checking nothing, for a value JAX traces.

    Under ``jax.jit``, ``jax.grad`` or ``jax.vmap`` the values are not known when the function is
    traced, so value checks cannot run: a non-finite ``theta`` then gives a non-finite result.
    Callers skip their other value checks when this returns False.
    """
    if tracing(theta):
        return False
    check_finite(xp, theta, name)
    return True


def as_series(y: Any, name: str = "y", obs_dim: int | None = None) -> tuple[Any, Array, Any]:
    """Validate observations: a finite ``(T,)`` or ``(T, obs_dim)`` array; returns ``(xp, y2d, dtype)``.

    A :class:`numpy.memmap`, zarr or Dask array stays on disk: ``y2d`` is then a row reader
    (:class:`sgmc._blocks.RowSource`), checked in one pass over blocks, and the model runs on NumPy.
    """
    if is_out_of_core(y):
        src = y if is_reader(y) else RowSource(y, name, layout="series")
        if isinstance(src, RowSource):
            check_dtype(src, "f", "float32 or float64 observations")
        if src.shape[0] < 1:
            msg = f"`{name}` must have shape (T,) or (T, obs_dim) with T >= 1; got {tuple(src.shape)}"
            raise ValueError(msg)
        if obs_dim is not None and src.shape[1] != obs_dim:
            msg = f"`{name}` must have {obs_dim} column(s) (obs_dim); got shape {tuple(src.shape)}"
            raise ValueError(msg)
        if src is not y:
            check_finite_blocks(src)
        xp = backends.get_backend("numpy").xp
        return xp, src, (xp.float64 if src.dtype.itemsize == 8 else xp.float32)
    y = as_data_array(y, name)
    xp = array_namespace(y, names=(name,))
    if y.ndim == 1:
        y = xp.reshape(y, (-1, 1))
    if y.ndim != 2 or y.shape[0] < 1:
        msg = f"`{name}` must have shape (T,) or (T, obs_dim) with T >= 1; got {tuple(y.shape)}"
        raise ValueError(msg)
    if obs_dim is not None and y.shape[1] != obs_dim:
        msg = f"`{name}` must have {obs_dim} column(s) (obs_dim); got shape {tuple(y.shape)}"
        raise ValueError(msg)
    dtype = y.dtype if xp.isdtype(y.dtype, "real floating") else xp.float64
    y = as_float_array(xp, y, dtype, name)
    check_finite(xp, y, name)
    return xp, y, dtype


class StateSpaceModel(Model):
    """Base class of state space models over an unconstrained parameter vector.

    Parameters
    ----------
    y : array (T,) or (T, obs_dim)
        Observations; their array library, dtype and device decide the model's.
    dim : int
        Dimension of the unconstrained parameter ``theta``.
    state_dim, obs_dim : int
        Dimensions of ``x_t`` and ``y_t``.

    Attributes
    ----------
    y : array (T, obs_dim)
    T, n_data : int
        Series length (``n_data = T``: a data pass is ``T`` time steps).
    state_dim, obs_dim, dim : int
    param_names : tuple of str
        Names of the ``dim`` coordinates of ``theta``.

    Notes
    -----
    Subclasses implement ``constrain``, ``unconstrain``, ``log_prior``, ``grad_log_prior``,
    ``simulate`` and either ``exact_window_score`` (exact smoothers) or ``particle_kernel``
    (particle smoothers, :mod:`sgmc.ssm.particle`), and ``log_lik``/``grad_log_lik`` when the
    likelihood is tractable. ``log_lik(theta)`` is the log-likelihood of the whole series, shape
    ``(chains,)`` (not per datum: the terms of a time series do not factorise).
    """

    param_names: tuple = ()
    #: score methods :meth:`window_score` accepts for this model
    score_methods: tuple = ("exact", "particle")
    #: appended to the runner's divergence message (off NumPy the gradients leave the check to it)
    step_note: str = STEP_NOTE

    def __init__(self, y: Any, dim: int, state_dim: int, obs_dim: int | None = None):
        xp, y, dtype = as_series(y, "y", obs_dim)
        super().__init__(y.shape[0], dim, xp, dtype, None if is_out_of_core(y) else device_of(y))
        self.y = y
        self.T = int(y.shape[0])
        self.state_dim = check_int(state_dim, "state_dim")
        self.obs_dim = int(y.shape[1])

    # -- parameters -------------------------------------------------------------------------------
    @_placeholder
    def constrain(self, theta: Array) -> Any:
        """Natural parameters (a NamedTuple of arrays with the leading axes of ``theta``)."""
        msg = f"{type(self).__name__} does not implement constrain"
        raise NotImplementedError(msg)

    @_placeholder
    def unconstrain(self, params: Any) -> Array:
        """The unconstrained ``theta`` of natural parameters (inverse of :meth:`constrain`)."""
        msg = f"{type(self).__name__} does not implement unconstrain"
        raise NotImplementedError(msg)

    def _theta(self, theta: Any) -> tuple[Array, bool]:
        """``theta`` as a ``(chains, dim)`` array of the model's namespace; True if it was 1-D."""
        if not is_array(theta):
            theta = self.xp.asarray(theta, dtype=self.dtype, device=self.device)
        return self._batched(theta)

    # -- simulation -------------------------------------------------------------------------------
    @_placeholder
    def simulate(self, rng: Any, T: int, theta: Any) -> tuple[Array, Array]:
        """Draw ``(x, y)`` of shapes ``(T, state_dim)`` and ``(T, obs_dim)`` at one ``theta`` (dim,)."""
        msg = f"{type(self).__name__} does not implement simulate"
        raise NotImplementedError(msg)

    # -- the exact likelihood, when tractable --------------------------------------------------------
    # These override Model's placeholders: here the likelihood is of the whole series, not per datum.
    @_placeholder
    def log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        """Log-likelihood of the whole series, shape ``(chains,)``."""
        msg = f"{type(self).__name__} has no tractable likelihood (log_lik)"
        raise NotImplementedError(msg)

    @_placeholder
    def grad_log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        """Gradient of the log-likelihood of the whole series, shape ``(chains, dim)``."""
        msg = f"{type(self).__name__} has no tractable likelihood gradient (grad_log_lik)"
        raise NotImplementedError(msg)

    def log_lik_and_grad(self, theta: Array) -> tuple[Array, Array]:
        """Log-likelihood ``(chains,)`` and its gradient ``(chains, dim)`` (one pass when possible)."""
        return self.log_lik(theta), self.grad_log_lik(theta)

    def _grad_from_pair(self, theta: Array, idx: Array | None = None) -> Array:
        """Exact gradient of the log-likelihood, ``(chains, dim)``: the second half of :meth:`log_lik_and_grad`.

        A model whose smoother gives both in one pass sets ``grad_log_lik = StateSpaceModel._grad_from_pair``.
        """
        if idx is not None:
            self._not_iid()
        return self.log_lik_and_grad(theta)[1]

    def _per_window(self, theta: Any, windows: Windows) -> tuple[Array, int, int]:
        """``theta`` (chains, dim) repeated for each of the M windows: ``(chains * M, dim)``, chains, M."""
        xp = self.xp
        theta, _ = self._theta(theta)
        c, M = windows.start.shape
        return xp.reshape(xp.broadcast_to(theta[:, None, :], (c, M, self.dim)), (c * M, self.dim)), c, M

    @staticmethod
    def _not_iid(*args: Any, **kwargs: Any) -> Any:
        msg = (
            "the terms of a time series are not independent, so a state space model cannot be "
            "subsampled datum by datum; use estimator='buffered' (sgmc.ssm.Buffered), or 'full' "
            "for models with a tractable likelihood"
        )
        raise TypeError(msg)

    # The posterior methods exist only when the likelihood is tractable, so that ``provides`` and
    # ``require`` (store_grads='full', the exact estimators) tell the truth about a model.
    def _exact(self, name: str) -> Any:
        if is_out_of_core(self.y):
            return _absent(type(self).__name__, name, on_disk=True)
        if provides(self, "grad_log_lik") and provides(self, "log_lik"):
            return getattr(self, "_" + name)
        return _absent(type(self).__name__, name)

    @property
    def grad_log_lik_sum(self) -> Any:  # type: ignore[override]
        """``grad_log_lik_sum(theta, idx=None, weights=None)``: the full gradient of the log-likelihood.

        Only ``idx=None`` is allowed: a time series cannot be subsampled datum by datum.
        """
        return self._exact("grad_log_lik_sum")

    def _grad_log_lik_sum(self, theta: Array, idx: Array | None = None, weights: Array | None = None) -> Array:
        # the estimators' entry point: a numerical failure here is a divergence (sgmc.ssm._divergence)
        if idx is not None or weights is not None:
            self._not_iid()
        return guarded(self.xp, f"gradient of {type(self).__name__}", self.grad_log_lik, theta)

    @property
    def log_posterior(self) -> Any:  # type: ignore[override]
        """``log_posterior(theta)``: exact log posterior, shape ``()`` or ``(chains,)``."""
        return self._exact("log_posterior")

    def _log_posterior(self, theta: Any) -> Array:
        theta, single = self._theta(theta)
        out = self.log_prior(theta) + self.log_lik(theta)
        return out[0, ...] if single else out

    @property
    def grad_log_posterior(self) -> Any:  # type: ignore[override]
        """``grad_log_posterior(theta)``: exact gradient of the log posterior."""
        return self._exact("grad_log_posterior")

    def _grad_log_posterior(self, theta: Any) -> Array:
        theta, single = self._theta(theta)
        out = self.grad_log_prior(theta) + self.grad_log_lik(theta)
        return out[0, ...] if single else out

    @property
    def log_posterior_and_grad(self) -> Any:  # type: ignore[override]
        """``log_posterior_and_grad(theta)``: both, in one smoother pass."""
        return self._exact("log_posterior_and_grad")

    def _log_posterior_and_grad(self, theta: Array) -> tuple[Array, Array]:
        ll, g = guarded(self.xp, f"log-likelihood and gradient of {type(self).__name__}", self.log_lik_and_grad, theta)
        return self.log_prior(theta) + ll, self.grad_log_prior(theta) + g

    # -- buffered subsequences ------------------------------------------------------------------------
    @_placeholder
    def exact_window_score(self, theta: Array, windows: Windows, y_windows: Array) -> Array:
        """Exact weighted score over the windows, ``(chains, dim)`` (see :meth:`window_score`)."""
        msg = f"{type(self).__name__} has no exact smoother; use method='particle'"
        raise NotImplementedError(msg)

    def window_score(
        self, rng: Any, theta: Array, windows: Windows, method: str = "exact", **options: Any
    ) -> tuple[Array, Array]:
        """Weighted smoothed score over buffered windows (thesis Eq. 3.5 without the prior term).

        Parameters
        ----------
        rng : sgmc Generator
            Used by particle smoothers only.
        theta : array (chains, dim)
        windows : Windows
            ``M`` windows per chain from :func:`sgmc.ssm.sample_windows`.
        method : {"exact", "particle"}
            Kalman smoother / forward-backward on each window, or a particle smoother
            (``options`` go to :func:`sgmc.ssm.particle.particle_window_score`: ``n_particles``,
            ``smoother``, ``resampling``, ...).

        Returns
        -------
        score : array (chains, dim)
            ``sum_m sum_j weight[., m, j] E[grad log p(y_t, x_t | x_{t-1}, theta)]`` with ``t =
            start + j``, each window's states smoothed given its own observations only, the state
            before the window drawn from ``p0`` (first window of the series) or the stationary
            distribution.
        n_evals : array (chains,)
            Time steps processed per chain (sum of window lengths).
        """
        check_choice(method, "method", self.score_methods)
        xp = self.xp
        y_w = gather_windows(xp, self.y, windows)
        if method == "exact":
            require(self, ("exact_window_score",), "method='exact'")
            if options:
                msg = f"method='exact' takes no options; got {sorted(options)}"
                raise TypeError(msg)
            score = self.exact_window_score(theta, windows, y_w)
            n_evals = xp.sum(windows.length, axis=-1)
            return score, n_evals
        require(self, ("particle_kernel",), "method='particle'")
        from .particle import particle_window_score

        return particle_window_score(rng, self, theta, windows, y_w, **options)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(T={self.T}, dim={self.dim})"


def _absent(cls_name: str, name: str, on_disk: bool = False) -> Any:
    def method(*args: Any, **kwargs: Any) -> Any:
        msg = f"{cls_name} has no tractable likelihood, so it has no exact {name}; use estimator='buffered'"
        if on_disk:
            msg = (f"{cls_name}'s series `y` is read from disk by rows, and its exact {name} needs the whole series "
                   "in memory; use estimator='buffered' (it reads only each window), or load `y` into memory")
        raise NotImplementedError(msg)

    method._sgmc_placeholder = True
    if on_disk:
        method._sgmc_reason = "its series `y` is read from disk by rows; the exact likelihood needs it in memory"
    method.__name__ = name
    return method
