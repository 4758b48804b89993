"""The loop over iterations for one group of chains.

:func:`run_chains` initialises a sampler for a group of chains (a ``(chains, dim)`` block advanced as
one array), steps it ``len(step_sizes)`` times and records what each step reports: the kept draws
(and their gradients), and per iteration the :class:`~sgmc.samplers.StepInfo`, from which
:func:`step_stats` derives per-chain statistics (gradient evaluations, batch size, acceptance, the
sampler's own quantities). The function is pure apart from the generator it is given, needs nothing
but its arguments, and runs the same in this process or in a worker of a process pool or a Dask
cluster. Everything is validated before it is called: inside the loop, the only work besides the
sampler's step is writing kept draws into preallocated arrays, one list store per iteration, and,
every ``check_every`` iterations, one finiteness check that turns a diverging step size into a clear
error instead of a trace of NaNs.

Nothing sampled is lost. A divergence raises :class:`DivergenceError` carrying the group's draws up
to the last finite check (``err.partial``); a ``stop()`` callable that turns true ends the loop at
the end of the current iteration with a partial result; and a ``checkpoint`` callable receives the
complete loop state (:class:`ChainsProgress`: sampler state, generator, draws and per-iteration
records so far) every ``checkpoint_every`` iterations, from which ``resume=`` continues with the
same draws as an uninterrupted loop.
"""

from __future__ import annotations

import contextlib
import numbers
import time
from typing import Any, Callable, NamedTuple, Sequence

from . import backends
from ._array_api import Array, array_namespace, at, device_of
from .diagnostics.runaway import Watch
from .samplers._compiled import plan as compiled_plan
from .samplers._fused import plan as fused_plan

#: The host backend, where statistics are kept; fixed, so looked up once.
_HOST = backends.get_backend("numpy")
_HOST_ARRAY = type(_HOST.xp.asarray(0.0))

__all__ = ["ChainsResult", "ChainsProgress", "DivergenceError", "run_chains", "step_stats", "check_diverged"]


class ChainsResult(NamedTuple):
    """What :func:`run_chains` returns for one group of chains.

    Attributes
    ----------
    draws : array (chains, n_keep, dim)
    grads : array (chains, n_keep, dim) or None
    stats : dict of host arrays
        Per chain and iteration, shape (chains, n_iter): ``n_evals``, ``batch_size``, ``wall_time``
        (seconds since this group started sampling), and where the sampler reports them
        ``accepted``, ``accept_prob`` and each of its ``extras``.
    state : NamedTuple
        The sampler state after the last iteration (None for a diverged group).
    n_done : int
        Iterations the arrays cover: all of them, or fewer when the loop was stopped or diverged.
    compile_time : float
        Seconds spent compiling blocks of iterations (JAX, :mod:`sgmc.samplers._compiled`); 0 elsewhere.
    """

    draws: Array
    grads: Array | None
    stats: dict
    state: Any
    n_done: int = -1
    compile_time: float = 0.0


class ChainsProgress(NamedTuple):
    """The complete state of :func:`run_chains` after ``k`` iterations: enough to continue exactly.

    Attributes
    ----------
    k : int
        Iterations done.
    j : int
        Draws kept so far (the first ``j`` slots of ``draws``).
    state : NamedTuple
        The sampler state (the estimator's state inside it).
    rng : sgmc Generator
        The group's generator, in its state after ``k`` iterations.
    draws, grads : arrays (chains, n_keep, dim)
        The preallocated draws (and gradients), filled up to ``j``.
    infos : list
        The :class:`~sgmc.samplers.StepInfo` of each iteration done.
    wall : list of float
        Seconds since the group started sampling, per iteration done.
    """

    k: int
    j: int
    state: Any
    rng: Any
    draws: Array
    grads: Array | None
    infos: list
    wall: list


class DivergenceError(FloatingPointError):
    """A chain's position stopped being finite; the draws up to the last finite check are kept.

    Attributes
    ----------
    iteration : int
        The 1-based iteration of the check that found non-finite positions.
    step_size : float
        The step size of that iteration.
    partial : ChainsResult or None
        The group's draws and statistics up to the last check that found every position finite.
    trace : Trace or None
        The whole run's draws so far, set by :func:`sgmc.sample` (see its Raises section).
    """

    def __init__(self, msg: str, iteration: int = 0, step_size: float = float("nan")):
        super().__init__(msg)
        self.iteration = iteration
        self.step_size = step_size
        self.partial = None
        self.trace = None
        self.group = None
        self.finished = None


def check_diverged(xp: Any, position: Array, k: int, h: float, name: str, note: str = "",
                   watch: Watch | None = None) -> None:
    """Raise ``FloatingPointError`` naming the step size if any position is not finite.

    ``note`` (a sampler's ``step_note``) says how a sampler whose step is on its own scale is tuned.
    With ``watch`` (a :class:`~sgmc.diagnostics.runaway.Watch`), every iteration since the start is
    checked through its running maximum of ``|theta|``, not only the current position.
    """
    ok = xp.all(xp.isfinite(position)) if watch is None else watch.finite()
    if not bool(ok):
        msg = (
            f"{name} chain diverged by iteration {k + 1}: positions are no longer finite with "
            f"step_size={h:g}; decrease the step size (SGLD on a target whose log density has a "
            f"gradient with Lipschitz constant M is stable only for h < 4/M){note}"
        )
        raise DivergenceError(msg, k + 1, float(h))


def run_chains(
    sampler: Any,
    estimator: Any,
    rng: Any,
    position: Array,
    step_sizes: Sequence[float],
    kept: Sequence[int],
    *,
    store_grads: bool | str = False,
    score: Callable | None = None,
    check_every: int = 100,
    progress: Callable[[int], None] | None = None,
    progress_every: int = 1,
    callback: Callable | None = None,
    quiet_float: Callable[[], Any] = contextlib.nullcontext,
    resume: ChainsProgress | None = None,
    checkpoint: Callable[[ChainsProgress], None] | None = None,
    checkpoint_every: int = 0,
    stop: Callable[[], bool] | None = None,
    backend: Any = None,
) -> ChainsResult:
    """Run one group of chains from ``position`` (chains, dim) and record the kept draws.

    Parameters
    ----------
    sampler, estimator
        A :class:`~sgmc.samplers.Sampler` and a :class:`~sgmc.estimators.GradientEstimator`.
    rng : sgmc Generator
        This group's stream: every random number of the group comes from it.
    position : array (chains, dim)
    step_sizes : sequence of float
        One per iteration.
    kept : sequence of int
        Increasing iteration indices whose states are recorded.
    store_grads : bool or {"estimate", "full"}
        Keep the sampler's gradient at each kept draw, or ``score(position)`` for ``"full"``.
    score : callable, optional
        The exact score, for ``store_grads="full"``.
    check_every : int
        Interval of the divergence check (and the last iteration is always checked).
    progress : callable, optional
        ``progress(n)`` with the number of iterations done, every ``progress_every`` iterations and
        at the end.
    callback : callable, optional
        ``callback(k, state)`` after every iteration.
    quiet_float : callable
        A context manager factory that silences the library's floating-point warnings; divergence
        is reported by the check instead.
    resume : ChainsProgress, optional
        Continue from this state (``rng`` and ``position`` are then taken from it).
    checkpoint : callable, optional
        ``checkpoint(progress)`` with a :class:`ChainsProgress` every ``checkpoint_every``
        iterations and when the loop is stopped.
    checkpoint_every : int
        Interval of ``checkpoint`` (0: only when stopped).
    stop : callable, optional
        Checked after every iteration; when it returns true the loop ends there and the result
        covers the iterations done (``n_done``).
    backend : Backend, optional
        The backend of ``position`` (a run's plan passes its own): its namespace and its copies to the
        host serve the loop and the statistics. Found from ``position`` if omitted.

    Raises
    ------
    DivergenceError
        When the positions stop being finite; ``err.partial`` holds the draws up to the last check
        that found them finite.
    """
    xp = array_namespace(position) if backend is None else backend.xp
    n_iter = len(step_sizes)
    chains, dim = position.shape
    n_keep = len(kept)
    dev = device_of(position)
    full = store_grads == "full"
    if resume is None:
        draws = xp.empty((chains, n_keep, dim), dtype=position.dtype, device=dev)
        grads = xp.empty((chains, n_keep, dim), dtype=position.dtype, device=dev) if store_grads else None
        infos: list = [None] * n_iter
        wall = [0.0] * n_iter
        j = k0 = 0
    else:
        draws, grads, rng, j, k0 = resume.draws, resume.grads, resume.rng, resume.j, resume.k
        infos = list(resume.infos) + [None] * (n_iter - resume.k)
        wall = list(resume.wall) + [0.0] * (n_iter - resume.k)
    step = sampler.step
    next_keep = kept[j] if j < n_keep else n_iter
    last_ok = k0  # iterations known to end at finite positions

    def done(k):  # the records of the first k iterations; a window left open at k is recorded as it stands
        if k == 0 or k % check_every == 0 or k == n_iter:
            return infos[:k]
        return infos[:k - 1] + [watch.peek(infos[k - 1])]

    def progress_at(k, state):
        return ChainsProgress(k, j, state, rng, draws, grads, done(k), wall[:k])

    def partial(k, state, n_kept):
        return _result(draws[:, :n_kept, :], None if grads is None else grads[:, :n_kept, :],
                       done(k), wall[:k], chains, state, k)

    with quiet_float():
        state = sampler.init(rng, position, estimator) if resume is None else resume.state
        t0 = time.perf_counter() - (wall[k0 - 1] if k0 else 0.0)
        note = getattr(sampler, "step_note", "")  # optional: samplers whose step is on their own scale
        note += getattr(getattr(estimator, "model", None), "step_note", "")  # and models' advice (sgmc.ssm)
        # the plans read the run's backend (its RunPlan's) where one is given
        fused = (fused_plan(sampler, estimator, state.position, backend)
                 or compiled_plan(sampler, estimator, state.position, backend))
        host = (backends.to_numpy if backend is None else backend.to_host, _HOST.xp)
        watch = Watch(xp, sampler, kept[0] if n_keep else n_iter, state.position, resume, host)
        if k0 % check_every and k0 < n_iter:  # resumed inside a window: continue it
            infos[k0 - 1] = watch.reopen(infos[k0 - 1])
        k = k0
        # Blocks of iterations in one native call (sgmc.samplers._fused, sgmc.samplers._compiled): the same
        # draws, generator and records as the loop below. A block ends at every checkpoint, and at every
        # divergence check unless the plan spans windows (it then keeps the state where each window ends);
        # each window is settled as the loop settles it (statistics, check, `stop`, `progress`), and with a
        # callback a block is one iteration.
        size = 1 if fused is None or callback is not None else fused.block_size(chains)
        spans = getattr(fused, "spans_windows", False) and size >= 2 * check_every
        stats = getattr(fused, "window_stats", False)
        if fused is not None and hasattr(fused, "write"):  # a block writer that updates the buffer in place
            def write(buf, j, rows, values):
                return fused.write(buf, j, values)
        else:
            def write(buf, j, rows, values):
                return at(buf, rows).set(values)
        while fused is not None and k < n_iter:
            end = min(n_iter, k + size)
            if checkpoint is not None and checkpoint_every:
                end = min(end, (k // checkpoint_every + 1) * checkpoint_every)
            window = check_every if spans and k % check_every == 0 and end - k >= 2 * check_every else 0
            if window:
                end = k + (end - k) // window * window  # whole windows; a last part window is a block of its own
            else:
                end = min(end, (k // check_every + 1) * check_every)
            hs = [step_sizes[i] for i in range(k, end)]
            z, idx = fused.draw(rng, end - k, chains)
            if stats:  # the block computes the watch's statistics where the draws are
                blk = fused.run(state, hs, z, idx, bool(store_grads) and not full, window, watch.block_args(k))
            else:
                blk = fused.run(state, hs, z, idx, (bool(store_grads) and not full) or watch.stein)
            if blk is None:  # a compiled block that must be run step by step (it ended non-finite): same stream
                next_keep = kept[j] if j < n_keep else n_iter
                break
            state = blk.state
            infos[k:end] = [watch.plain(i) for i in blk.infos]
            before, now = (wall[k - 1] if k else 0.0), time.perf_counter() - t0
            wall[k:end] = [before + (now - before) * (i + 1) / (end - k) for i in range(end - k)]
            while j < n_keep and kept[j] < end:
                run = 1  # kept iterations in a row are copied at once
                while j + run < n_keep and kept[j + run] < end and kept[j + run] == kept[j] + run:
                    run += 1
                a = kept[j] - k
                rows = (slice(None), slice(j, j + run), slice(None))
                draws = write(draws, j, rows, xp.permute_dims(blk.positions[a:a + run, ...], (1, 0, 2)))
                for i in range(run) if full else ():
                    grads = at(grads, (slice(None), j + i, slice(None))).set(score(blk.positions[a + i, ...]))
                if store_grads and not full:
                    grads = write(grads, j, rows, xp.permute_dims(blk.grads[a:a + run, ...], (1, 0, 2)))
                j += run
            if callback is not None:
                callback(k, state)
            halt = False
            for a in range(k, end, window or end - k):  # settle the block's windows in order
                b = min(end, a + window) if window else end
                if blk.stats is not None:
                    watch.window(k, a, b, blk.stats, (a - k) // window if window else 0, blk.positions)
                elif window:
                    watch.block(a, blk.positions[a - k:b - k, ...], None if blk.grads is None else blk.grads[a - k:b - k, ...])
                else:
                    watch.block(a, blk.positions, blk.grads)
                halt = halt or (stop is not None and stop())
                if b % check_every == 0 or b == n_iter:
                    infos[b - 1] = watch.flush(infos[b - 1])
                if b % check_every == 0 or b == n_iter or halt:
                    try:
                        check_diverged(xp, state.position, b - 1, step_sizes[b - 1], sampler.name, note, watch)
                    except DivergenceError as err:
                        err.partial = partial(last_ok, None, sum(1 for i in kept[:j] if i < last_ok))
                        raise
                    last_ok = b
                if progress is not None and (b // progress_every > a // progress_every or b == n_iter):
                    progress(b)
                if halt and b < n_iter and (b == end or blk.at is not None):
                    if b < end:  # a window inside the block: its state, and the generator where it ended
                        state, j = blk.at((b - k) // window - 1), sum(1 for i in kept[:j] if i < b)
                    if checkpoint is not None:
                        checkpoint(progress_at(b, state))
                    return partial(b, state, j)
            if checkpoint is not None and checkpoint_every and end % checkpoint_every == 0 and end < n_iter:
                checkpoint(progress_at(end, state))
            k = end
            if fused.declined:  # the native does not take this case: the loop below continues the same stream
                next_keep = kept[j] if j < n_keep else n_iter
                break
        compiled = getattr(fused, "compile_seconds", 0.0)
        if fused is not None and k >= n_iter:
            return _result(draws, grads, infos, wall, chains, state, n_iter, compiled, backend)
        for k in range(k, n_iter):
            try:
                state, infos[k] = step(rng, state, estimator, step_sizes[k])
            except DivergenceError as err:  # raised inside a gradient (sgmc.ssm): complete it here
                err.args = (f"{sampler.name} chain diverged at iteration {k + 1} with step_size={step_sizes[k]:g}: "
                            f"{err}",)
                err.iteration, err.step_size = k + 1, float(step_sizes[k])
                err.partial = partial(k, None, j)
                raise
            watch.one(k, state.position, state.grad)
            if k == next_keep:
                draws = at(draws, (slice(None), j, slice(None))).set(state.position)
                if full:
                    grads = at(grads, (slice(None), j, slice(None))).set(score(state.position))
                elif store_grads:
                    grads = at(grads, (slice(None), j, slice(None))).set(state.grad)
                j += 1
                next_keep = kept[j] if j < n_keep else n_iter
            if callback is not None:
                callback(k, state)
            wall[k] = time.perf_counter() - t0
            halt = stop is not None and stop()
            infos[k] = watch.flush(infos[k]) if (k + 1) % check_every == 0 or k + 1 == n_iter else watch.plain(infos[k])
            if (k + 1) % check_every == 0 or k + 1 == n_iter or halt:
                try:
                    check_diverged(xp, state.position, k, step_sizes[k], sampler.name, note, watch)
                except DivergenceError as err:
                    err.partial = partial(last_ok, None, sum(1 for i in kept[:j] if i < last_ok))
                    raise
                last_ok = k + 1
            if progress is not None and ((k + 1) % progress_every == 0 or k + 1 == n_iter):
                progress(k + 1)
            if halt and k + 1 < n_iter:
                if checkpoint is not None:
                    checkpoint(progress_at(k + 1, state))
                return partial(k + 1, state, j)
            if checkpoint is not None and checkpoint_every and (k + 1) % checkpoint_every == 0 and k + 1 < n_iter:
                checkpoint(progress_at(k + 1, state))
    return _result(draws, grads, infos, wall, chains, state, n_iter, compiled, backend)


def _result(draws, grads, infos, wall, chains, state, n_done, compiled=0.0, backend=None) -> ChainsResult:
    stats = step_stats(infos, chains, backend=backend)
    stats["wall_time"] = _column(wall, chains, backend)
    return ChainsResult(draws, grads, stats, state, n_done, compiled)


def _column(values: list, chains: int, backend: Any = None) -> Any:
    """Per-iteration values (numbers, or per-chain arrays) as a float64 host array (chains, n_iter).

    Arrays are stacked where they live (on ``backend``, found from them if omitted) and copied to the host once.
    """
    hx = _HOST.xp
    if set(map(type, values)) <= {int, float}:  # the common case, without a check per value
        row = hx.asarray(values, dtype=hx.float64)
        return hx.broadcast_to(row[None, :], (chains, len(values)))
    arrays = [v for v in values if not isinstance(v, numbers.Number)]
    if not arrays:
        row = hx.asarray(values, dtype=hx.float64)
        return hx.broadcast_to(row[None, :], (chains, len(values)))
    if all(isinstance(v, _HOST_ARRAY) for v in arrays):
        xp, to_host, dev = hx, hx.asarray, None  # already on the host (a compiled block's window statistics)
    else:
        xp = array_namespace(arrays[0]) if backend is None else backend.xp
        to_host = backends.to_numpy if backend is None else backend.to_host
        dev = device_of(arrays[0])
    if 4 * len(arrays) <= len(values):  # a few arrays among numbers (a window's value at its end): those alone
        at_ = [i for i, v in enumerate(values) if not isinstance(v, numbers.Number)]
        row = hx.asarray([v if isinstance(v, numbers.Number) else 0.0 for v in values], dtype=hx.float64)
        out = hx.asarray(hx.broadcast_to(row[None, :], (chains, len(values))), copy=True)
        cols = [xp.broadcast_to(xp.astype(v, xp.float64), (chains,)) for v in arrays]
        out[:, at_] = hx.asarray(to_host(xp.stack(cols, axis=1)), dtype=hx.float64)
        return out
    cols = [
        xp.full((chains,), float(v), device=dev) if isinstance(v, numbers.Number)
        else xp.broadcast_to(xp.astype(v, xp.float64), (chains,))
        for v in values
    ]
    return hx.asarray(to_host(xp.stack(cols, axis=1)), dtype=hx.float64)


def step_stats(infos: Sequence[Any], chains: int, backend: Any = None) -> dict:
    """Per-chain statistics ``(chains, n_iter)`` from a run's :class:`~sgmc.samplers.StepInfo` list.

    ``n_evals`` (every per-datum evaluation of the step: the estimator's and the sampler's own) and
    ``batch_size`` always; ``accepted`` and ``accept_prob`` when the sampler reports them; each key of
    ``extras``. Per-chain arrays among them are stacked on ``backend`` (found from them if omitted).
    """
    if not infos:
        return {}
    out = {
        "n_evals": _column([i.n_evals for i in infos], chains, backend),
        "batch_size": _column([i.estimate.batch_size for i in infos], chains, backend),
    }
    first = infos[0]
    if first.accepted is not None:
        out["accepted"] = _column([i.accepted for i in infos], chains, backend)
    if first.accept_prob is not None:
        out["accept_prob"] = _column([i.accept_prob for i in infos], chains, backend)
    if first.extras:
        for key in first.extras:
            out[key] = _column([i.extras[key] for i in infos], chains, backend)
    return out

