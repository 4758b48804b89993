"""The model protocol: posteriors with analytic per-datum gradients.

A posterior over ``theta`` in R^d for N independent data is

    log pi(theta) = log p(theta) + sum_{i=1}^N log f(y_i | theta) + const.

The array API has no automatic differentiation, so a model supplies the per-datum log-likelihood terms
and their gradients for a batch of indices, the log prior and its gradient, and ``n_data`` (N).
Estimators only ever call :meth:`Model.grad_log_lik_sum`, which a model should implement without
materialising the (chains, batch, dim) tensor of per-datum gradients when it can.

Shapes: ``theta`` is ``(chains, dim)``; ``idx`` is ``None`` (all data) or an int64 array
``(chains, batch)`` of per-chain indices; ``weights`` has the shape of ``idx``.

Writing your own model
----------------------
Subclass :class:`Model` and implement ``log_prior``, ``grad_log_prior``, ``log_lik`` and
``grad_log_lik`` (and, for speed, ``grad_log_lik_sum``), using ``xp`` from the data::

    from sgmc import array_namespace
    from sgmc.models import Model, take_rows

    class PoissonRegression(Model):
        '''y_i ~ Poisson(exp(x_i . theta)), theta ~ N(0, I).'''

        def __init__(self, X, y):
            super().__init__(X.shape[0], X.shape[1], array_namespace(X, y), X.dtype)
            self.X, self.y = X, y

        def log_prior(self, theta):
            return -0.5 * self.xp.sum(theta**2, axis=-1)

        def grad_log_prior(self, theta):
            return -theta

        def _eta(self, theta, idx):
            xp = self.xp
            if idx is None:
                return theta @ self.X.T, self.y[None, :], None
            Xb = take_rows(xp, self.X, idx)
            return xp.matmul(Xb, theta[..., None])[..., 0], take_rows(xp, self.y, idx), Xb

        def log_lik(self, theta, idx=None):
            eta, y, _ = self._eta(theta, idx)
            return y * eta - self.xp.exp(eta)          # up to a constant

        def grad_log_lik(self, theta, idx=None):
            eta, y, Xb = self._eta(theta, idx)
            Xb = self.X[None, ...] if Xb is None else Xb
            return (y - self.xp.exp(eta))[..., None] * Xb

Any object with the same attributes and methods works: the base class only adds conveniences.

The protocol in parts
---------------------
What a component needs from a model is written down as a :class:`typing.Protocol`, and each
component checks for exactly that, with an error that names the missing method:

* :class:`Target` (samplers, the runner, diagnostics): ``xp``, ``dim``, ``dtype``, ``device``, and
  optionally the exact ``log_posterior`` and ``grad_log_posterior``.
* :class:`IIDData` (subsampling estimators): ``n_data``, ``grad_log_prior`` and
  ``grad_log_lik_sum(theta, idx, weights)``; optionally per-datum ``hess_log_lik`` or ``lipschitz``
  bounds for estimators that use curvature.
* State space models (a time series with latent states, gradients by Fisher's identity over a
  buffered subsequence) get their own protocol beside these two.
"""

from __future__ import annotations

from typing import Any, NamedTuple, Protocol, runtime_checkable

from .. import backends
from .._array_api import (
    Array,
    Namespace,
    array_namespace,
    as_float_array,
    check_finite,
    device_of,
    is_array,
    namespace_name,
)
from .._param_names import check_param_names, names_given

__all__ = [
    "Target",
    "IIDData",
    "Model",
    "take_rows",
    "as_data_array",
    "check_compatible",
    "check_target",
    "model_facts",
    "ModelFacts",
    "require",
    "provides",
    "on_backend",
]


@runtime_checkable
class Target(Protocol):
    """What samplers, the runner and diagnostics need from a posterior.

    Attributes
    ----------
    xp : namespace
        Array namespace of the model's arrays; parameters live in it too.
    dim : int
        Dimension of ``theta``.
    dtype : dtype
        Floating dtype of parameters.
    device : object
        Device of the model's arrays (``None`` when the model does not say).

    Notes
    -----
    Optional, for exact estimators and references: ``log_posterior(theta) -> (chains,)`` and
    ``grad_log_posterior(theta) -> (chains, dim)``.
    """

    xp: Any
    dim: int
    dtype: Any
    device: Any


@runtime_checkable
class IIDData(Protocol):
    """What subsampling estimators need: N independent data and per-datum gradient sums.

    Notes
    -----
    Optional, for estimators that use curvature (preferential subsampling, adaptive subsample
    sizes, step-size grids): ``hess_log_lik(theta, idx) -> (chains, batch, dim, dim)``,
    ``lipschitz(idx) -> idx.shape`` and ``prior_lipschitz() -> float``. Control-variate estimators
    call ``grad_log_lik_diff_sum(theta, centre, idx, weights)`` (the base class provides it from two
    ``grad_log_lik_sum`` calls).
    """

    n_data: int

    def grad_log_prior(self, theta: Array) -> Array: ...

    def grad_log_lik_sum(self, theta: Array, idx: Array | None = None, weights: Array | None = None) -> Array: ...


def _placeholder(fn):
    """Mark a base-class method that only raises: :func:`provides` treats it as absent."""
    fn._sgmc_placeholder = True
    return fn


def _works(attr: Any) -> bool:
    """Whether a model attribute is a working method (not missing, not the base class's placeholder)."""
    return callable(attr) and not getattr(attr, "_sgmc_placeholder", False)


def provides(model: Any, name: str) -> bool:
    """True when ``model`` has a working method ``name`` (not the base class's placeholder)."""
    return _works(getattr(model, name, None))


def _refuse(kind: str, missing: list, reasons: set, purpose: str) -> None:
    msg = (
        f"{purpose} needs the model method(s) {', '.join(missing)}, which "
        f"{kind} does not provide; implement them (see sgmc.models.Model) or "
        "choose a method that does not need them"
    )
    why = set(reasons) - {""}
    if why:  # a placeholder that knows why the method is absent (e.g. data read from disk)
        msg += " (" + "; ".join(sorted(why)) + ")"
    raise TypeError(msg)


def require(model: Any, names: tuple[str, ...], purpose: str) -> None:
    """Raise ``TypeError`` naming every method of ``names`` that ``model`` lacks for ``purpose``."""
    missing = [n for n in names if not provides(model, n)]
    if missing:
        _refuse(type(model).__name__, missing,
                {getattr(getattr(model, n, None), "_sgmc_reason", "") for n in missing}, purpose)


#: The protocol's methods whose presence :func:`model_facts` records (the ones components ask for).
PROTOCOL_METHODS = (
    "log_prior", "grad_log_prior", "log_lik", "grad_log_lik", "grad_log_lik_sum", "grad_log_lik_diff_sum",
    "log_posterior", "grad_log_posterior", "log_posterior_and_grad", "log_lik_total", "hess_log_lik",
    "hess_log_lik_sum", "lipschitz", "prior_lipschitz", "lipschitz_constant",
)


class ModelFacts(NamedTuple):
    """What checking a model found, so that later components need not look at it again.

    Attributes
    ----------
    kind : str
        The model's class name (for messages).
    n_data : Any
        Its ``n_data`` attribute (0 when it has none).
    names : tuple of str or None
        Its checked ``param_names`` (None when it has none).
    methods : frozenset of str
        The methods of :data:`PROTOCOL_METHODS` that work on it.
    reasons : tuple of (str, str)
        ``(method, why)`` for absent methods whose placeholder says why.
    """

    kind: str
    n_data: Any
    names: tuple | None
    methods: frozenset
    reasons: tuple

    def provides(self, name: str) -> bool:
        """:func:`provides` for the checked model."""
        if name not in PROTOCOL_METHODS:
            msg = f"`name`: {name!r} is not one of the recorded protocol methods {PROTOCOL_METHODS}"
            raise ValueError(msg)
        return name in self.methods

    def require(self, names: tuple[str, ...], purpose: str) -> None:
        """:func:`require` for the checked model."""
        missing = [n for n in names if not self.provides(n)]
        if missing:
            why = dict(self.reasons)
            _refuse(self.kind, missing, {why.get(n, "") for n in missing}, purpose)


def model_facts(model: Any, name: str = "model", *, names: bool = True) -> ModelFacts:
    """Check that ``model`` has the :class:`Target` attributes and valid ``param_names``; return its facts.

    The one check of a model on its way into a run: components built with the returned
    :class:`ModelFacts` ask it, not the model, which methods it has. ``names=False`` leaves
    ``param_names`` unread (``facts.names`` is None), for functions that do not use them.
    """
    missing = []
    for attr in ("xp", "dim", "dtype"):
        if not hasattr(model, attr):
            missing.append(attr)
    if missing:
        msg = (
            f"`{name}` must follow the sgmc model protocol (sgmc.models.Target); "
            f"{type(model).__name__} lacks {', '.join(missing)}"
        )
        raise TypeError(msg)
    given = names_given(getattr(model, "param_names", None)) if names else None
    if given is not None:  # checked before a run, not after it
        given = check_param_names(given, model.dim, what=f"{name}.param_names")
    methods, reasons = set(), []
    for method in PROTOCOL_METHODS:
        attr = getattr(model, method, None)
        if _works(attr):
            methods.add(method)
        elif getattr(attr, "_sgmc_reason", ""):
            reasons.append((method, attr._sgmc_reason))
    return ModelFacts(type(model).__name__, getattr(model, "n_data", 0), given, frozenset(methods), tuple(reasons))


def check_target(model: Any, name: str = "model") -> Any:
    """Check that ``model`` has the :class:`Target` attributes; return it."""
    model_facts(model, name)
    return model


def take_rows(xp: Namespace, a: Array, idx: Array) -> Array:
    """Rows ``a[idx]`` for an integer index array of any shape: result ``idx.shape + a.shape[1:]``."""
    flat = xp.reshape(idx, (-1,))
    out = xp.take(a, flat, axis=0)
    return xp.reshape(out, tuple(idx.shape) + tuple(a.shape[1:]))


def as_data_array(x: Any, name: str) -> Array:
    """Arrays pass through; lists and scalars become NumPy arrays (the I/O edge)."""
    if is_array(x):
        return x
    if x is None or isinstance(x, (str, bytes)):
        msg = f"`{name}` must be an array or nested sequence of numbers; got {type(x).__name__}"
        raise TypeError(msg)
    try:
        return backends.asarray(x, backend="numpy")
    except (TypeError, ValueError) as exc:
        msg = f"`{name}` must be an array or nested sequence of numbers; got {type(x).__name__}"
        raise TypeError(msg) from exc


def normalise_namespace(xp: Any) -> Any:
    """The array-API namespace sgmc uses for the library of ``xp``.

    A model may be built with the library's own module (``numpy``) or its array-API-compatible
    namespace; both name the same library, and sgmc works with the namespace its backend uses
    (array-api-compat's for NumPy and PyTorch). A namespace no backend claims is returned unchanged.

    Examples
    --------
    >>> import numpy
    >>> from sgmc.models.base import normalise_namespace
    >>> from sgmc import array_namespace
    >>> normalise_namespace(numpy) is array_namespace(numpy.zeros(1))
    True
    """
    if xp is None:
        return xp
    try:
        return backends.get_backend(xp).xp
    except (TypeError, ValueError, ImportError):
        return xp


def same_library(xp1: Any, xp2: Any) -> bool:
    """Whether two namespaces belong to one array library (compared by backend, not module object)."""
    try:
        return backends.get_backend(xp1) == backends.get_backend(xp2)
    except (TypeError, ValueError, ImportError):
        return xp1 is xp2


def on_backend(backend: Any, *values: Any, device: Any = None) -> tuple:
    """The ``backend=`` switch of model constructors: move array-like ``values`` to ``backend``.

    ``backend=None`` returns the values unchanged (the arrays decide). Otherwise arrays and nested
    sequences are copied to the backend and device (:func:`sgmc.backends.move`, which says what to
    install when the library or the GPU is missing); Python scalars pass through.
    """
    if backend is None:
        return values
    out = []
    for v in values:
        if is_array(v) or isinstance(v, (list, tuple)):
            v = backends.move(as_data_array(v, "data"), backend, device=device)
        out.append(v)
    return tuple(out)


def check_compatible(model: Any, x: Array, name: str) -> None:
    """Raise unless ``x`` is an array of ``model.xp`` on ``model.device`` (when the model states one).

    Raises
    ------
    TypeError
        ``x`` comes from another array library.
    ValueError
        ``x`` lives on another device.
    """
    xp = array_namespace(x, names=(name,))
    if xp is not model.xp and not same_library(xp, model.xp):
        msg = (
            f"`{name}` is a {namespace_name(xp)} array but `model data` is a {namespace_name(model.xp)} "
            f"array; convert explicitly with sgmc.backends.asarray(..., backend={namespace_name(model.xp)!r})"
        )
        raise TypeError(msg)
    device = getattr(model, "device", None)
    here = device_of(x)  # None for a value traced by JAX: it matches the data's device
    if device is not None and here is not None and here != device:
        msg = (
            f"`{name}` is on device {here!r} but `model data` is on device {device!r}; move it "
            "explicitly (sgmc never copies between devices silently)"
        )
        raise ValueError(msg)


class Model:
    """Base class for posteriors over ``theta`` in R^``dim`` given ``n_data`` independent data.

    Subclasses implement the per-datum terms; this class provides the posterior and batching helpers.

    Attributes
    ----------
    n_data : int
        N, the number of data (0 for a target density with no data).
    dim : int
        Dimension of ``theta``.
    xp : namespace
        Array namespace of the model's data; parameters live in it too.
    dtype : dtype
        Floating dtype of parameters.
    device : object
        Device of the data.
    param_names : tuple of str
        Names of the ``dim`` coordinates of ``theta`` (empty here: traces then call them
        ``theta[0]``, ``theta[1]``, ...); the library's models set their own.
    """

    param_names: tuple = ()

    def __init__(self, n_data: int, dim: int, xp: Namespace, dtype: Any, device: Any = None):
        self.n_data = int(n_data)
        self.dim = int(dim)
        self.xp = normalise_namespace(xp)
        self.dtype = dtype
        self.device = device

    @property
    def has_data(self) -> bool:
        """True when the posterior has a likelihood part (``n_data > 0``)."""
        return self.n_data > 0

    # Models travel to worker processes (process pools, Dask) by pickle: the namespace goes by its
    # backend's name and is looked up again on arrival.
    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["xp"] = backends.get_backend(self.xp).name
        return state

    def __setstate__(self, state: dict) -> None:
        state = dict(state)
        state["xp"] = backends.get_backend(state["xp"]).xp
        self.__dict__.update(state)

    # -- to be provided by subclasses -------------------------------------------------------------
    @_placeholder
    def log_prior(self, theta: Array) -> Array:
        """Log prior density (up to a constant), shape ``(chains,)``."""
        msg = f"{type(self).__name__} does not implement log_prior"
        raise NotImplementedError(msg)

    @_placeholder
    def grad_log_prior(self, theta: Array) -> Array:
        """Gradient of the log prior, shape ``(chains, dim)``."""
        msg = f"{type(self).__name__} does not implement grad_log_prior"
        raise NotImplementedError(msg)

    @_placeholder
    def log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        """Per-datum log-likelihood terms, shape ``(chains, batch)`` (``batch = N`` for ``idx=None``)."""
        msg = f"{type(self).__name__} does not implement log_lik"
        raise NotImplementedError(msg)

    @_placeholder
    def grad_log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        """Per-datum log-likelihood gradients, shape ``(chains, batch, dim)``."""
        msg = f"{type(self).__name__} does not implement grad_log_lik"
        raise NotImplementedError(msg)

    # -- optional ---------------------------------------------------------------------------------
    def grad_log_lik_sum(
        self, theta: Array, idx: Array | None = None, weights: Array | None = None
    ) -> Array:
        """``sum_i w_i grad log f(y_i | theta)`` over the batch, shape ``(chains, dim)``."""
        g = self.grad_log_lik(theta, idx)
        if weights is not None:
            g = g * weights[..., None]
        return self.xp.sum(g, axis=-2)

    def grad_log_lik_diff_sum(
        self, theta: Array, centre: Array, idx: Array, weights: Array | None = None
    ) -> Array:
        """``sum_i w_i [grad log f(y_i | theta) - grad log f(y_i | centre)]`` over the batch ``idx``.

        The control-variate estimators' per-iteration call: the same rows at two points, shape
        ``(chains, dim)`` (``centre`` is ``(chains, dim)`` too). This fallback calls
        :meth:`grad_log_lik_sum` twice, gathering the rows twice; models that can evaluate both
        points from one gather of the rows (the GLMs) override it.
        """
        return self.grad_log_lik_sum(theta, idx, weights) - self.grad_log_lik_sum(centre, idx, weights)

    @_placeholder
    def hess_log_lik(self, theta: Array, idx: Array | None = None) -> Array:
        """Per-datum Hessians of the log-likelihood, shape ``(chains, batch, dim, dim)``."""
        msg = f"{type(self).__name__} does not provide per-datum Hessians"
        raise NotImplementedError(msg)

    @_placeholder
    def lipschitz(self, idx: Array | None = None) -> Array:
        """Per-datum Lipschitz constants of ``grad log f(y_i | .)``, shape ``idx.shape`` (or ``(N,)``)."""
        msg = f"{type(self).__name__} does not provide per-datum Lipschitz constants"
        raise NotImplementedError(msg)

    # -- derived ----------------------------------------------------------------------------------
    def _batched(self, theta: Array) -> tuple[Array, bool]:
        xp = self.xp
        if theta is None or isinstance(theta, (str, bytes)):
            msg = f"`theta` must be an array of shape (dim,) or (chains, dim) with dim={self.dim}; got {type(theta).__name__}"
            raise TypeError(msg)
        if not is_array(theta):
            theta = xp.asarray(theta, dtype=self.dtype, device=self.device)
        check_compatible(self, theta, "theta")
        if theta.ndim == 1:
            theta = xp.reshape(theta, (1, -1))
            single = True
        else:
            single = False
        if theta.ndim != 2 or theta.shape[-1] != self.dim:
            msg = f"`theta` must have shape (dim,) or (chains, dim) with dim={self.dim}; got {tuple(theta.shape)}"
            raise ValueError(msg)
        return theta, single

    def log_posterior(self, theta: Array) -> Array:
        """Unnormalised full-data log posterior; ``theta`` of shape (dim,) or (chains, dim)."""
        theta, single = self._batched(theta)
        out = self.log_prior(theta)
        if self.has_data:
            out = out + self.log_lik_total(theta)
        return out[0, ...] if single else out

    def log_lik_total(self, theta: Array) -> Array:
        """``sum_i log f(y_i | theta)`` over all data, shape ``(chains,)`` for ``theta`` (chains, dim).

        In memory, the sum of :meth:`log_lik`'s N terms. A model on data read from disk (one with a
        ``stream_rows``, :mod:`sgmc._blocks`) sums ``log_lik(theta, idx)`` over blocks of indices of
        about ``stream_rows`` numbers in all (rows per block divided among the chains), so a full
        log density never holds N terms per chain.
        """
        xp = self.xp
        rows = getattr(self, "stream_rows", None)
        if not rows:
            return xp.sum(self.log_lik(theta), axis=-1)
        chains = theta.shape[0]
        step = max(1, int(rows) // chains)
        total = xp.zeros((chains,), dtype=self.dtype, device=self.device)
        for start in range(0, self.n_data, step):
            stop = min(start + step, self.n_data)
            idx = xp.arange(start, stop, dtype=xp.int64, device=self.device)
            idx = xp.broadcast_to(xp.reshape(idx, (1, -1)), (chains, stop - start))
            total = total + xp.sum(self.log_lik(theta, idx), axis=-1)
        return total

    def grad_log_posterior(self, theta: Array) -> Array:
        """Full-data gradient of the log posterior; ``theta`` of shape (dim,) or (chains, dim)."""
        theta, single = self._batched(theta)
        out = self.grad_log_prior(theta)
        if self.has_data:
            out = out + self.grad_log_lik_sum(theta)
        return out[0, ...] if single else out

    def log_posterior_and_grad(self, theta: Array) -> tuple[Array, Array]:
        """Log posterior ``(chains,)`` and its gradient ``(chains, dim)`` at ``theta`` (chains, dim).

        No input checks: this is the exact estimators' per-iteration call. Models whose two parts
        share work (GLMs: the linear predictor) override it to compute it once.
        """
        logp = self.log_prior(theta)
        grad = self.grad_log_prior(theta)
        if self.has_data:
            logp = logp + self.log_lik_total(theta)
            grad = grad + self.grad_log_lik_sum(theta)
        return logp, grad

    def zeros(self, chains: int) -> Array:
        """A ``(chains, dim)`` zero array in the model's namespace, dtype and device."""
        return self.xp.zeros((chains, self.dim), dtype=self.dtype, device=self.device)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(n_data={self.n_data}, dim={self.dim})"


def validate_design(
    X: Any, y: Any, *, y_name: str = "y", backend: Any = None
) -> tuple[Namespace, Array, Array, Any]:
    """Shared checks for regression data: 2-D finite X, 1-D finite y of matching length.

    ``backend`` moves the data there first (the constructors' explicit switch).
    """
    X = as_data_array(X, "X")
    y = as_data_array(y, y_name)
    X, y = on_backend(backend, X, y)
    xp = array_namespace(X, y, names=("X", y_name))
    if X.ndim != 2:
        msg = f"`X` must be 2-D (n_data, dim); got shape {tuple(X.shape)}"
        raise ValueError(msg)
    if y.ndim != 1 or y.shape[0] != X.shape[0]:
        msg = f"`{y_name}` must be 1-D with {X.shape[0]} entries to match `X`; got shape {tuple(y.shape)}"
        raise ValueError(msg)
    if X.shape[0] == 0:
        msg = "`X` has no rows; at least one datum is needed"
        raise ValueError(msg)
    dtype = X.dtype if xp.isdtype(X.dtype, "real floating") else xp.float64
    X = as_float_array(xp, X, dtype, "X")
    y = as_float_array(xp, y, dtype, y_name)
    check_finite(xp, X, "X")
    check_finite(xp, y, y_name)
    return xp, X, y, dtype
