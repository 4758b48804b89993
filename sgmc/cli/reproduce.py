"""``sgmc reproduce NAME``: one of the papers' experiments (:mod:`sgmc.experiments`), its tables printed."""

from __future__ import annotations

import os

from .. import backends
from .._validation import did_you_mean
from .parsing import _fail


def _command_reproduce(args) -> int:
    from .. import experiments

    if args.list:
        for name, title in experiments.list_experiments():
            print(f"{name:20s} {title}")
        return 0
    if args.name is None:
        _fail("reproduce needs an experiment NAME; 'sgmc reproduce --list' names them")
    if args.name not in experiments.EXPERIMENTS:
        _fail(f"unknown experiment {args.name!r};{did_you_mean(args.name, list(experiments.EXPERIMENTS))} "
              "'sgmc reproduce --list' names them")
    out = args.out if args.out is not None else f"sgmc-{args.name}"
    backends.require(args.backend)
    result = experiments.reproduce(args.name, out, quick=args.quick, seed=args.seed,
                                   progress=False if args.no_progress else True, backend=args.backend,
                                   **dict(args.option))
    for path in result["meta"]["files"]:
        if path.endswith(".md"):
            with open(os.path.join(out, path), encoding="utf-8") as fh:
                print(fh.read())
    print(f"outputs written to {out}/ ({', '.join(result['meta']['files'])}); "
          f"{result['meta']['wall_time_s']:.1f} s")
    return 0
