"""Run the CUDA kernels of sgmc on the CPU: the same ``.cu`` text, compiled as C++ with ``emu.h``.

:class:`EmuRuntime` implements the runtime interface of :mod:`sgmc.backends.cupy._native`
(``lib`` and ``kernel(file, name, defines)``) with NumPy arrays and kernels built by the system C++
compiler into a shared library loaded with ctypes, so the host code and the device code that run on
a GPU both run here. Libraries are built once per process in a temporary directory.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from pathlib import Path

import numpy as np

from sgmc.backends.cupy._compile import kernel_source

HEADER = Path(__file__).with_name("emu.h")

_SCALARS = {
    "long long": ctypes.c_longlong,
    "int": ctypes.c_int,
    "unsigned": ctypes.c_uint,
    "double": ctypes.c_double,
    "float": ctypes.c_float,
}
_POINTEES = {"double": np.float64, "float": np.float32, "long long": np.int64, "int": np.int32}

_SIGNATURE = re.compile(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(([^)]*)\)', re.S)


def compiler() -> str | None:
    """The C++ compiler used (``$CXX``, else g++ or clang++ on the PATH), or None."""
    for name in (os.environ.get("CXX"), "g++", "clang++"):
        if name and shutil.which(name):
            return shutil.which(name)
    return None


def _parse_params(text: str) -> list[tuple[str, bool, str]]:
    """(base type, is pointer, name) for each parameter of a kernel signature."""
    out = []
    for raw in text.split(","):
        raw = raw.replace("__restrict__", " ").replace("const", " ").strip()
        ptr = "*" in raw
        raw = raw.replace("*", " ")
        words = raw.split()
        out.append((" ".join(words[:-1]), ptr, words[-1]))
    return out


class EmuKernel:
    """A kernel callable like ``cupy.RawKernel``: ``kernel(grid, block, args)`` with NumPy arrays."""

    def __init__(self, fn, name: str, params: list[tuple[str, bool, str]]):
        self._fn = fn
        self.name = name
        self.params = params
        fn.restype = None
        fn.argtypes = [ctypes.c_uint, ctypes.c_uint] + [
            ctypes.c_void_p if ptr else _SCALARS[t] for t, ptr, _ in params
        ]

    def __call__(self, grid, block, args):
        if len(grid) != 1 or len(block) != 1:
            msg = "the emulator runs one-dimensional launches only"
            raise ValueError(msg)
        if len(args) != len(self.params):
            msg = f"{self.name} takes {len(self.params)} arguments; got {len(args)}"
            raise TypeError(msg)
        keep = []
        conv = []
        for (t, ptr, pname), a in zip(self.params, args):
            if ptr:
                if a is None:
                    # CuPy 13.0-13.6 pass None as an undefined non-null pointer: a kernel that
                    # tests for null would read from it. Host code passes the integer 0 instead.
                    msg = f"{self.name}: `{pname}` is None; pass a null pointer as the integer 0"
                    raise TypeError(msg)
                if isinstance(a, (int, np.integer)) and not isinstance(a, bool):
                    if int(a) != 0:
                        msg = f"{self.name}: `{pname}` is the integer {int(a)}; only 0 (null) is a pointer"
                        raise TypeError(msg)
                    conv.append(None)  # ctypes passes None as a NULL void*
                    continue
                if not isinstance(a, np.ndarray) or not a.flags.c_contiguous:
                    msg = f"{self.name}: `{pname}` must be a C-contiguous NumPy array"
                    raise TypeError(msg)
                if a.dtype != np.dtype(_POINTEES[t]):
                    msg = f"{self.name}: `{pname}` is {t}* but the array is {a.dtype}"
                    raise TypeError(msg)
                keep.append(a)
                conv.append(a.ctypes.data)
            else:
                conv.append(a.item() if isinstance(a, np.generic) else a)
        self._fn(int(grid[0]), int(block[0]), *conv)


class EmuRuntime:
    """NumPy plus kernels compiled for the CPU; see the module docstring."""

    lib = np

    def __init__(self, build_dir: str | os.PathLike | None = None, cxx: str | None = None):
        self.cxx = cxx or compiler()
        if self.cxx is None:
            msg = "no C++ compiler (g++ or clang++) found"
            raise RuntimeError(msg)
        self._dir = Path(build_dir or tempfile.mkdtemp(prefix="sgmc-cuda-emu-"))
        self._libs: dict[tuple, tuple[ctypes.CDLL, dict]] = {}

    def build(self, filename: str, defines: dict[str, int] | None = None):
        key = (filename, tuple(sorted((defines or {}).items())))
        if key in self._libs:
            return self._libs[key]
        src = kernel_source(filename)
        kernels = [(m.group(1), _parse_params(m.group(2))) for m in _SIGNATURE.finditer(src)]
        lines = [f'#include "{HEADER}"', f'#include "{filename}"']
        for name, params in kernels:
            decl = ", ".join(f"{t}{'*' if p else ''} {n}" for t, p, n in params)
            names = ", ".join(n for _, _, n in params)
            lines.append(
                f'extern "C" __attribute__((visibility("default"))) void sgmc_emu_{name}(unsigned grid, unsigned block, {decl}) '
                f"{{ sgmc_emu::launch(grid, block, [&] {{ {name}({names}); }}); }}"
            )
        tag = hashlib.sha1(repr((key, src)).encode()).hexdigest()[:12]
        work = self._dir / tag
        work.mkdir(parents=True, exist_ok=True)
        (work / filename).write_text(src)
        (work / "wrap.cpp").write_text("\n".join(lines) + "\n")
        lib_path = work / "kernels.so"
        flags = [f"-D{k}={int(v)}" for k, v in sorted((defines or {}).items())]
        cmd = [self.cxx, "-std=c++20", "-O1", "-shared", "-fPIC", "-pthread", "-Wall", "-Werror",
               "-Wno-unknown-pragmas", "-ffp-contract=off",
               # each library keeps its own __shared__ statics and launch state: nothing is unique
               # process-wide, nothing but the launchers is exported
               "-fno-gnu-unique", "-fvisibility=hidden", *flags, "-I", str(work), str(work / "wrap.cpp"), "-o", str(lib_path)]
        res = subprocess.run(cmd, capture_output=True, text=True)
        if res.returncode != 0:
            msg = f"{filename} does not compile as C++:\n{' '.join(cmd)}\n{res.stderr}"
            raise RuntimeError(msg)
        lib = ctypes.CDLL(str(lib_path))
        table = {name: params for name, params in kernels}
        self._libs[key] = (lib, table)
        return self._libs[key]

    def kernel(self, filename: str, name: str, defines: dict[str, int] | None = None) -> EmuKernel:
        lib, table = self.build(filename, defines)
        if name not in table:
            msg = f"{filename} has no kernel {name!r}; it has {sorted(table)}"
            raise ValueError(msg)
        return EmuKernel(getattr(lib, f"sgmc_emu_{name}"), name, table[name])
