"""Labelled images: MNIST from the IDX files a user has (:func:`read_idx`), or scikit-learn's 8x8 digits."""

from __future__ import annotations

import os
from typing import Any, NamedTuple

import numpy as np

from .._validation import check_file, check_int


class ImageData(NamedTuple):
    """Labelled images as flat rows with pixels in [0, 1] (NumPy arrays).

    Attributes
    ----------
    X, y : ndarray (n, pixels) float64 and (n,) int64
        Training images and labels.
    X_test, y_test : ndarray
        Test images and labels.
    shape : tuple of int
        Height and width of an image.
    source : str
        Where the data came from (``"mnist: FOLDER"`` or ``"sklearn digits"``).
    """

    X: np.ndarray
    y: np.ndarray
    X_test: np.ndarray
    y_test: np.ndarray
    shape: tuple
    source: str


_MNIST_FILES = {
    "train-images": "train-images-idx3-ubyte",
    "train-labels": "train-labels-idx1-ubyte",
    "test-images": "t10k-images-idx3-ubyte",
    "test-labels": "t10k-labels-idx1-ubyte",
}


def read_idx(path: Any, ndim: int) -> np.ndarray:
    """Read one IDX file of unsigned bytes (MNIST's format), gzip-compressed or plain.

    The format: a magic number ``0x00000800 + ndim`` (big-endian; ``0x08`` is unsigned byte), then
    ``ndim`` big-endian 32-bit sizes, then the data. Compression is detected from the file's first
    two bytes, not its name.

    Parameters
    ----------
    path : str or path-like
    ndim : int
        Expected number of dimensions (1 for labels, 3 for images).

    Returns
    -------
    ndarray of uint8 with the sizes from the header.

    Raises
    ------
    ValueError
        ``path`` is not an existing file (a folder, an empty name, a missing file), or the magic
        number, the number of dimensions, or the length of the data does not match; the message
        names the file.
    """
    import gzip

    path = check_file(path, "path", "IDX file")
    with open(path, "rb") as fh:
        raw = fh.read()
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError) as exc:
            msg = f"{path}: starts like a gzip file but cannot be decompressed ({exc})"
            raise ValueError(msg) from exc
    magic = 0x0800 + ndim
    got = int.from_bytes(raw[:4], "big") if len(raw) >= 4 else None
    if got != magic:
        found = "no magic number" if got is None else f"magic number 0x{got:08x}"
        msg = (f"{path}: {found}, not that of an IDX file of unsigned bytes with {ndim} dimension(s) "
               f"(0x{magic:08x}); is it the right file?")
        raise ValueError(msg)
    if len(raw) < 4 + 4 * ndim:
        msg = f"{path}: {len(raw)} bytes is too short for an IDX header with {ndim} dimension(s)"
        raise ValueError(msg)
    dims = tuple(int.from_bytes(raw[4 + 4 * k: 8 + 4 * k], "big") for k in range(ndim))
    n = int(np.prod(dims))
    body = raw[4 + 4 * ndim:]
    if len(body) != n:
        msg = f"{path}: the header gives sizes {dims} ({n} bytes) but the file holds {len(body)} data bytes"
        raise ValueError(msg)
    return np.frombuffer(body, dtype=np.uint8).reshape(dims)


def _find_idx(folder: str, stem: str) -> str:
    for name in (stem, stem + ".gz", stem.replace("-idx", ".idx"), stem.replace("-idx", ".idx") + ".gz"):
        p = os.path.join(folder, name)
        if os.path.isfile(p):
            return p
    msg = (f"`path`={folder!r} has no file {stem} or {stem}.gz; give the folder holding MNIST's four "
           "IDX files (train-images-idx3-ubyte, train-labels-idx1-ubyte, t10k-images-idx3-ubyte, "
           "t10k-labels-idx1-ubyte, each plain or gzip-compressed)")
    raise FileNotFoundError(msg)


def _read_mnist(folder: str, n_train: int | None, n_test: int | None) -> ImageData:
    if not os.path.isdir(folder):
        msg = f"`path` must be a folder holding MNIST's IDX files; {folder!r} is not a folder"
        raise FileNotFoundError(msg)
    parts = {}
    for key, stem in _MNIST_FILES.items():
        f = _find_idx(folder, stem)
        parts[key] = (read_idx(f, 3 if key.endswith("images") else 1), f)
    out = []
    for split, limit in (("train", n_train), ("test", n_test)):
        (img, fi), (lab, fl) = parts[f"{split}-images"], parts[f"{split}-labels"]
        if img.shape[0] != lab.shape[0]:
            msg = f"{fi} holds {img.shape[0]} images but {fl} holds {lab.shape[0]} labels"
            raise ValueError(msg)
        if lab.size and int(lab.max()) > 9:
            msg = f"{fl}: labels must be digits 0-9; found {int(lab.max())}"
            raise ValueError(msg)
        k = img.shape[0] if limit is None else min(int(limit), img.shape[0])
        out.append((img[:k].reshape(k, -1).astype(np.float64) / 255.0, lab[:k].astype(np.int64)))
    shapes = {parts["train-images"][0].shape[1:], parts["test-images"][0].shape[1:]}
    if len(shapes) != 1:
        msg = f"training and test images differ in size: {sorted(shapes)}"
        raise ValueError(msg)
    return ImageData(out[0][0], out[0][1], out[1][0], out[1][1], shapes.pop(), f"mnist: {folder}")


def mnist(path: Any = None, *, n_train: int | None = None, n_test: int | None = None,
          test_fraction: float = 0.2, seed: int = 0) -> ImageData:
    """MNIST from the IDX files a user has, or scikit-learn's 8x8 digits offline.

    Parameters
    ----------
    path : str or path-like, optional
        Folder with ``train-images-idx3-ubyte``, ``train-labels-idx1-ubyte``,
        ``t10k-images-idx3-ubyte`` and ``t10k-labels-idx1-ubyte`` (each plain or ``.gz``;
        compression is detected from the content). Nothing is downloaded. Without ``path``, the
        1,797 8x8 images of ``sklearn.datasets.load_digits`` (shipped with scikit-learn, ``pip
        install "sgmc[data]"``) are split at random (``seed``) into training and test sets.
    n_train, n_test : int, optional
        Keep only the first so many images of each set (MNIST files only).
    test_fraction : float
        Share of the digits held out for testing (digits only).
    seed : int
        Seed of the digits' split.

    Returns
    -------
    ImageData
        Pixels scaled to [0, 1] (MNIST's bytes divided by 255, the digits' 0-16 by 16).

    Examples
    --------
    >>> from sgmc.datasets import mnist
    >>> d = mnist()                       # doctest: +SKIP
    >>> d.X.shape, d.X_test.shape, d.shape  # doctest: +SKIP
    ((1438, 64), (359, 64), (8, 8))
    """
    if path is not None:
        if not isinstance(path, (str, os.PathLike)):
            msg = f"`path` must be the folder holding MNIST's IDX files (a str or os.PathLike); got {path!r}"
            raise TypeError(msg)
        return _read_mnist(os.fspath(path), n_train, n_test)
    try:
        from sklearn.datasets import load_digits
    except ImportError as exc:
        msg = ("mnist() without `path` uses scikit-learn's 8x8 digits, and scikit-learn is not installed: "
               "pip install \"sgmc[data]\" (or scikit-learn), or pass `path=` a folder with MNIST's IDX files")
        raise ImportError(msg) from exc
    if not 0.0 < float(test_fraction) < 1.0:
        msg = f"`test_fraction` must be in (0, 1); got {test_fraction!r}"
        raise ValueError(msg)
    digits = load_digits()
    X = np.asarray(digits.data, dtype=np.float64) / 16.0
    y = np.asarray(digits.target, dtype=np.int64)
    perm = np.random.default_rng(check_int(seed, "seed", minimum=0)).permutation(X.shape[0])
    n_te = int(round(float(test_fraction) * X.shape[0]))
    te, tr = perm[:n_te], perm[n_te:]
    return ImageData(X[tr], y[tr], X[te], y[te], (8, 8), "sklearn digits")
