"""Random numbers for PyTorch tensors, drawn by a ``torch.Generator`` on the tensors' own device.

:class:`TorchGenerator` holds one ``torch.Generator`` on its device (Mersenne Twister on the CPU,
Philox on CUDA) seeded from the run's :class:`numpy.random.SeedSequence`, and makes every draw there:
no NumPy draw and no host copy once a run is set up. Its children come from the sequence's
children (``spawn``), as for every other backend, so a chain group gets the same stream in this
process, in a worker process or on a Dask worker.

Seeding. On the CPU the 624 words of the Mersenne Twister's state are taken from the sequence
(``generate_state(624)``, as NumPy's ``MT19937`` does), since ``manual_seed`` keeps only 32 bits of a
seed there; on other devices ``manual_seed`` gets 64 bits of the sequence. So one seed gives the same
draws again on the same kind of device (and torch version), but CUDA draws are not CPU draws: the
generators differ. torch sizes its CUDA random kernels by the card's multiprocessors, so large draws
can differ between GPU models.

Integers. ``torch.randint`` reduces a 32-bit random word modulo the range below 2**28 (a skew of up
to a few percent between values); here every integer is a 63-bit random word reduced modulo
``high``, whose skew is below ``high / 2**63`` (as :mod:`sgmc._draw_continuation`'s) and zero when
``high`` is a power of two.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ._base import Backend, Generator, numpy_dtype

__all__ = ["TorchGenerator", "torch_device", "torch_dtype"]

#: Mersenne Twister words and the byte layout of the CPU generator's state (``get_state()``):
#: int64 initial seed, int32 ``left``, int32 ``seeded``, uint64 ``next``, then the 624 words, each
#: held in a uint64.
_MT_WORDS = 624
_MT_STATE_BYTES = 5056
_MT_OFFSET = 24
_LOW63 = (1 << 63) - 1


def torch_device(device: Any) -> torch.device:
    """A ``torch.device`` with its index (``"cuda"`` names the current CUDA device), CPU for None."""
    try:
        dev = torch.device("cpu" if device is None else device)
    except (RuntimeError, TypeError) as err:
        msg = f"`device` must be a torch device or its name (such as 'cpu' or 'cuda:0'); got {device!r}"
        raise ValueError(msg) from err
    if dev.type == "cuda" and dev.index is None:
        dev = torch.device("cuda", torch.cuda.current_device())
    return dev


def torch_dtype(dtype: Any, default: torch.dtype) -> torch.dtype:
    """The torch dtype for a torch, NumPy or named dtype (``default`` for None)."""
    if dtype is None:
        return default
    if isinstance(dtype, torch.dtype):
        return dtype
    return getattr(torch, numpy_dtype(dtype).name)


def _seeded(seed_seq: np.random.SeedSequence, device: torch.device) -> torch.Generator:
    gen = torch.Generator(device=device)
    seed = int(seed_seq.generate_state(1, np.uint64)[0])
    gen.manual_seed(seed)
    if device.type != "cpu":
        return gen  # Philox and the other device generators keep all 64 bits
    state = gen.get_state().numpy().copy()
    first = state[_MT_OFFSET:_MT_OFFSET + 8]
    if state.size != _MT_STATE_BYTES or int(first.view(np.uint64)[0]) != seed & 0xFFFFFFFF:
        return gen  # a layout this module does not know: the 64-bit manual seed (32 bits used)
    words = seed_seq.generate_state(_MT_WORDS, np.uint32).astype(np.uint64)
    if not words.any():
        words[0] = 0x80000000  # the one state the twister cannot leave
    state[_MT_OFFSET:_MT_OFFSET + 8 * _MT_WORDS] = words.view(np.uint8)
    gen.set_state(torch.from_numpy(state))
    return gen


class TorchGenerator(Generator):
    """Random numbers from a ``torch.Generator`` on the tensors' device.

    Parameters
    ----------
    backend : Backend
        The ``"torch"`` backend.
    seed_seq : numpy.random.SeedSequence
        Seeds the generator; :meth:`spawn` spawns its children, as
        :class:`~sgmc.backends.HostGenerator` does, so a seed gives the same streams whatever runs
        them.
    device : torch.device or str, optional
        Where the generator lives and the draws are made (the CPU if omitted).

    Notes
    -----
    Draws for one seed are the same again on the same kind of device, but CUDA draws differ from CPU
    draws (Philox there, the Mersenne Twister here). Integers are drawn as int64 and
    then cast, so their values do not depend on the ``dtype`` asked for. The generator pickles as its
    sequence, device name and the state of its ``torch.Generator`` (``get_state()``).

    Examples
    --------
    >>> from sgmc.backends import default_rng
    >>> rng = default_rng(0, backend="torch")
    >>> rng.normal((2, 3)).shape
    torch.Size([2, 3])
    """

    def __init__(self, backend: Backend, seed_seq: np.random.SeedSequence, device: Any = None):
        self.backend = backend
        self.device = torch_device(device)
        self._seed_seq = seed_seq
        self._gen = _seeded(seed_seq, self.device)

    def normal(self, shape, dtype=None):
        dt = torch_dtype(dtype, torch.float64)
        return torch.randn(tuple(shape), generator=self._gen, dtype=dt, device=self.device)

    def uniform(self, shape, dtype=None):
        dt = torch_dtype(dtype, torch.float64)
        return torch.rand(tuple(shape), generator=self._gen, dtype=dt, device=self.device)

    def integers(self, high, shape, dtype=None):
        high = int(high)
        if high < 1:
            msg = f"`high` must be a positive integer; got {high}"
            raise ValueError(msg)
        bits = torch.empty(tuple(shape), dtype=torch.int64, device=self.device)
        bits.random_(-(1 << 63), None, generator=self._gen)  # 64 random bits per value
        out = torch.remainder(torch.bitwise_and(bits, _LOW63), high)
        dt = torch_dtype(dtype, torch.int64)
        return out if dt == torch.int64 else out.to(dt)

    def spawn(self, n):
        return [type(self)(self.backend, s, self.device) for s in self._seed_seq.spawn(n)]

    @property
    def torch_generator(self) -> torch.Generator:
        """The underlying ``torch.Generator`` (for calls of torch's own random functions)."""
        return self._gen

    def __getstate__(self) -> dict:
        return {"backend": self.backend, "device": str(self.device), "seed_seq": self._seed_seq,
                "state": self._gen.get_state().numpy().copy()}

    def __setstate__(self, state: dict) -> None:
        self.backend = state["backend"]
        self.device = torch_device(state["device"])
        self._seed_seq = state["seed_seq"]
        self._gen = torch.Generator(device=self.device)
        saved = np.asarray(state["state"])
        current = self._gen.get_state()
        if saved.dtype != np.uint8 or saved.shape != tuple(current.shape):
            msg = (f"the saved torch generator state is {saved.dtype} {saved.shape}; a {self.device.type} "
                   f"generator of this torch keeps uint8 {tuple(current.shape)}")
            raise ValueError(msg)
        try:
            self._gen.set_state(torch.from_numpy(saved.copy()))
        except RuntimeError as err:
            msg = f"the saved torch generator state is not a valid {self.device.type} state: {err}"
            raise ValueError(msg) from err
