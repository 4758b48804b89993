"""CUDA source of the native kernels: loading, NVRTC compilation and the per-process module cache.

The kernels live in ``kernels/*.cu`` beside this module (package data): device code only, no host
code, so the same text compiles with NVRTC for a GPU and, in the tests, as C++ on the CPU. Sizes that
the compiler should know (the dimension of the Stein kernel, threads per block) are passed as
``-D`` defines; each distinct set of defines is compiled once per process on first use, and CuPy's
on-disk kernel cache keeps the binary across processes.

:func:`compile_source` runs NVRTC without a GPU (it needs only the NVRTC library, from the
``cuda-compile`` extra), which is how the test suite checks on any machine that every kernel
compiles for the architectures sgmc targets.
"""

from __future__ import annotations

from importlib import resources
from typing import Any, Callable

__all__ = [
    "KERNEL_FILES",
    "ARCHITECTURES",
    "kernel_source",
    "kernel_names",
    "nvrtc_options",
    "CUPY_ADDED_OPTIONS",
    "runtime_options",
    "compile_source",
    "CupyRuntime",
]

#: The kernel files, with the defines each needs to compile (the values used by the checks that
#: run without a GPU; at run time the host code picks its own).
KERNEL_FILES: dict[str, dict[str, int]] = {
    "resample.cu": {},
    "stein.cu": {"SGMC_DIM": 10, "SGMC_BLOCK": 128},
    "glm.cu": {"SGMC_BLOCK": 128},
    "stochvol.cu": {"SGMC_BLOCK": 256},
    "subsample.cu": {"SGMC_BLOCK": 128},
}

#: Architectures the kernels are checked to compile for: A100 (sm_80) and H100 (sm_90).
ARCHITECTURES = ("sm_80", "sm_90")

#: Extra compiler options per file. Resampling must reproduce its twins' rounding exactly, so no
#: multiply-add may be fused there.
EXTRA_OPTIONS: dict[str, tuple[str, ...]] = {"resample.cu": ("--fmad=false",)}

#: Options CuPy adds to every run-time compile of a ``RawModule`` (``cupy/cuda/compiler.py``, CuPy
#: 13 and 14): denormals flushed to zero in single precision, and functions without a space
#: qualifier compiled as device code. CuPy also adds ``-arch=sm_<cc>`` for the current device (here,
#: ``--gpu-architecture``) and, with NVRTC 12.8 or later, ``--pch`` (a precompiled-header cache,
#: no effect on the code). The offline checks compile with these too, so they check what runs.
CUPY_ADDED_OPTIONS: tuple[str, ...] = ("--device-as-default-execution-space", "-ftz=true")

_SOURCES: dict[str, str] = {}


def kernel_source(filename: str) -> str:
    """Text of ``kernels/<filename>`` shipped with the package."""
    if filename not in KERNEL_FILES:
        msg = f"unknown kernel file {filename!r}; the kernels are {sorted(KERNEL_FILES)}"
        raise ValueError(msg)
    if filename not in _SOURCES:
        _SOURCES[filename] = resources.files(__package__).joinpath("kernels", filename).read_text("utf-8")
    return _SOURCES[filename]


def kernel_names(filename: str) -> list[str]:
    """Names of the ``extern "C" __global__`` functions in a kernel file, in source order."""
    import re

    return re.findall(r'extern\s+"C"\s+__global__\s+void\s+(\w+)\s*\(', kernel_source(filename))


def nvrtc_options(
    defines: dict[str, int] | None = None, arch: str | None = None, filename: str | None = None
) -> tuple[str, ...]:
    """Options sgmc passes to ``cupy.RawModule`` (CuPy adds :data:`CUPY_ADDED_OPTIONS` and the architecture)."""
    opts = ["-std=c++17", *EXTRA_OPTIONS.get(filename or "", ())]
    if arch is not None:
        opts.append(f"--gpu-architecture={arch}")
    opts += [f"-D{k}={int(v)}" for k, v in sorted((defines or {}).items())]
    return tuple(opts)


def runtime_options(
    defines: dict[str, int] | None = None, arch: str = "sm_90", filename: str | None = None
) -> tuple[str, ...]:
    """Every option of the run-time compile for ``arch``: sgmc's own, then what CuPy adds.

    This is what :func:`compile_source` (the offline NVRTC checks and the resource report) uses.
    """
    return (*nvrtc_options(defines, arch, filename), *CUPY_ADDED_OPTIONS)


def compile_source(
    filename: str, arch: str = "sm_90", defines: dict[str, int] | None = None, *, cubin: bool = False,
    verbose: bool = False,
) -> tuple[bytes, str]:
    key = (filename, arch, tuple(sorted((defines or KERNEL_FILES.get(filename, {})).items())), cubin, verbose,
           kernel_source(filename))
    if key not in _COMPILED:
        _COMPILED[key] = _compile(filename, arch, defines, cubin=cubin, verbose=verbose)
    return _COMPILED[key]


_COMPILED: dict[tuple, tuple[bytes, str]] = {}


def _compile(
    filename: str, arch: str, defines: dict[str, int] | None, *, cubin: bool, verbose: bool
) -> tuple[bytes, str]:
    """Compile one kernel file with NVRTC for ``arch``, without a GPU: ``(ptx or cubin, log)``.

    ``verbose`` asks ptxas (inside NVRTC, for ``cubin=True``) for its resource report (registers,
    spills, shared memory per kernel), which lands in the log.

    Raises
    ------
    ImportError
        When CuPy or the NVRTC library is missing (``pip install "sgmc[cuda-compile]"``).
    RuntimeError
        With the compiler's log when the source does not compile.
    """
    try:
        from cupy_backends.cuda.libs import nvrtc
    except ImportError as exc:  # pragma: no cover - depends on the machine
        msg = f'compiling CUDA kernels needs CuPy and NVRTC ({exc}); install them with pip install "sgmc[cuda-compile]"'
        raise ImportError(msg) from exc
    src = kernel_source(filename)
    defines = dict(KERNEL_FILES[filename]) if defines is None else defines
    opts = list(runtime_options(defines, arch, filename))
    if verbose:
        opts.append("--ptxas-options=-v")
    try:
        prog = nvrtc.createProgram(src, filename, [], [])
    except Exception as exc:  # the library itself failed to load
        msg = f'NVRTC is not usable here ({exc}); install it with pip install "sgmc[cuda-compile]"'
        raise ImportError(msg) from exc
    try:
        try:
            nvrtc.compileProgram(prog, opts)
        except nvrtc.NVRTCError as exc:
            log = nvrtc.getProgramLog(prog)
            msg = f"{filename} does not compile for {arch} with {opts}:\n{log}"
            raise RuntimeError(msg) from exc
        log = nvrtc.getProgramLog(prog)
        binary = nvrtc.getCUBIN(prog) if cubin else nvrtc.getPTX(prog)
    finally:
        nvrtc.destroyProgram(prog)
    if isinstance(binary, str):
        binary = binary.encode()
    return binary, log


class CupyRuntime:
    """Kernels on the current CUDA device through ``cupy.RawModule``, compiled once per set of defines and device.

    ``lib`` is the ``cupy`` module; :meth:`kernel` returns a callable ``f(grid, block, args)``.
    The host code in :mod:`sgmc.backends.cupy._native` is written against this small interface,
    which the tests also implement on the CPU. Modules and the functions looked up in them are
    cached per (file, defines, device) and (file, defines, device, name): CuPy does not cache
    ``RawModule.get_function``, which would otherwise run on every launch.
    """

    def __init__(self) -> None:
        import cupy

        self.lib = cupy
        self._modules: dict[tuple, Any] = {}
        self._functions: dict[tuple, Callable] = {}

    def kernel(self, filename: str, name: str, defines: dict[str, int] | None = None) -> Callable:
        key = (filename, tuple(sorted((defines or {}).items())), self.lib.cuda.runtime.getDevice(), name)
        fn = self._functions.get(key)
        if fn is None:
            mod = self._modules.get(key[:3])
            if mod is None:
                mod = self.lib.RawModule(code=kernel_source(filename), options=nvrtc_options(defines, None, filename))
                self._modules[key[:3]] = mod
            fn = self._functions[key] = mod.get_function(name)
        return fn
