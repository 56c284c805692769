"""The engine's own CPU kernel for the matmuls of a decode / verification step (issue 17), built once and cached.

Why: at one to a few tokens per step, a matmul streams its weights once and does little arithmetic with them, so
its speed is the memory bandwidth it reaches. torch's fp16-weight op (FBGEMM) reaches ~9-10 GB/s on the house model
where llama.cpp's f32 kernels stream ~19 GB/s; ``matvec.cpp`` reads each half-precision weight row once per group of
up to 6 input rows, converts it in registers (AVX-512 or AVX2, with F16C) and splits the output rows over torch's intra-op threads;
the RMSNorm before a matmul, the MLP's silu(gate)*up and the residual add are done inside it, and the attention of
a step (rotary, cache write, softmax over the cached keys in blocks split over the threads) is one more kernel:
on a small model each of those was a handful of torch ops whose dispatch cost more than their arithmetic.

The extension is compiled with torch's C++ extension builder (g++ and ninja) the first time it is asked for and
cached under torch's extensions folder (``TORCH_EXTENSIONS_DIR``) in a folder named by the source's hash, so a later
start loads it in ~0.1 s. When it cannot be built (no compiler, no ninja, a build error) ``ops()`` is None, one log line
says why, and the model keeps torch's FBGEMM op.
"""
from __future__ import annotations

import hashlib
import logging
import os
import shutil
import threading
import time
from pathlib import Path

import torch

log = logging.getLogger(__name__)

_HERE = Path(__file__).parent
_SOURCES = ("matvec.cpp", "qmatvec.cpp")         # compiled into one extension
_FILES = _SOURCES + ("kernel_common.h",)          # everything the build reads (hashed, copied into its folder)
_lock = threading.Lock()
_state: dict[str, object] = {}

STALE_LOCK_S = 600                     # a build takes ~20 s on 2 busy cores
DISABLE_ENV = "COMPLETER_NO_KERNELS"   # set to 1 to keep torch's ops (a comparison, or a machine where the build hangs)


def _ninja_on_path() -> None:
    """torch's extension builder runs ``ninja`` from PATH; the ``ninja`` wheel (a dependency) puts it in the
    environment's bin folder, which is not on PATH when the server is started by its full path without activating
    the environment (an editor starting ``.venv/bin/completer-lsp``): add the wheel's folder then."""
    if shutil.which("ninja"):
        return
    try:
        import ninja  # the PyPI wheel
    except ImportError:
        return
    os.environ["PATH"] = ninja.BIN_DIR + os.pathsep + os.environ.get("PATH", "")


def _incomplete(so: Path) -> str | None:
    """Why the shared library ``so`` is not a whole ELF file (its section headers past its end, as when a link is
    killed), else None."""
    import struct
    with open(so, "rb") as f:
        head = f.read(64)
    if len(head) < 64 or head[:4] != b"\x7fELF" or head[4] != 2:
        return "not a 64-bit ELF file"
    order = "<" if head[5] == 1 else ">"
    shoff, = struct.unpack_from(order + "Q", head, 0x28)
    shentsize, shnum = struct.unpack_from(order + "HH", head, 0x3A)
    size = so.stat().st_size
    if shoff + shentsize * shnum > size:
        return f"{size} bytes, cut short (its section headers end at {shoff + shentsize * shnum})"
    return None


def _cpu_flags() -> bytes:
    """The instruction sets this CPU reports (Linux: /proc/cpuinfo's first ``flags`` line), part of the build's key:
    ``-march=native`` compiles for the CPU at hand, so a cache folder shared by two machines (a home directory on
    NFS, a container image built elsewhere) must not hand an AVX-512 build to an AVX2 CPU (SIGILL)."""
    try:
        with open("/proc/cpuinfo", "rb") as f:
            for line in f:
                if line.startswith((b"flags", b"Features")):
                    return b" ".join(sorted(line.split(b":", 1)[1].split()))
    except OSError:
        pass
    return os.uname().machine.encode()


def build_name(codes: dict[str, bytes], cflags: list[str], ldflags: list[str], cpu: bytes | None = None) -> str:
    """The extension's name and build folder: a hash of the sources, the flags and, with ``-march=native``, the
    CPU's instruction sets (``cpu``, default this machine's)."""
    key = b"".join(f.encode() + codes[f] for f in sorted(codes)) + " ".join(cflags + ldflags).encode()
    if "-march=native" in cflags:
        key += _cpu_flags() if cpu is None else cpu
    return f"completer_kernels_{hashlib.sha256(key).hexdigest()[:12]}"


def _build() -> object | None:
    if os.environ.get(DISABLE_ENV, "") not in ("", "0"):
        _state["reason"] = f"{DISABLE_ENV} is set"
        return None
    try:
        native = ["-O3", "-march=native"] if os.uname().machine in ("x86_64", "AMD64") else ["-O3"]
        # -fopenmp: at::parallel_for is a header template that runs everything on one thread unless the file is
        # compiled with OpenMP (until this flag the kernels never used a second core); linking it names
        # libgomp.so.1, which resolves to the copy torch has already loaded, so there is one thread pool
        cflags, ldflags = native + ["-fopenmp"], ["-fopenmp"]
        # one build folder per source text and flags, holding its own copy of the source: checkouts of the same
        # version (worktrees, CI copies) share one build, and different versions never rebuild over each other
        codes = {f: (_HERE / f).read_bytes() for f in _FILES}
        name = build_name(codes, cflags, ldflags)
        from torch.utils import cpp_extension    # its import is ~0.05 s; its load() is what the cached path skips
        folder = Path(cpp_extension._get_build_directory(name, verbose=False))
        for f, code in codes.items():
            dst = folder / f
            if not dst.is_file() or dst.read_bytes() != code:
                tmp = folder / f".{os.getpid()}.{f}"
                tmp.write_bytes(code)
                os.replace(tmp, dst)
        lock = folder / "lock"                     # left behind by a build that was killed: torch would wait forever
        if lock.exists() and time.time() - lock.stat().st_mtime > STALE_LOCK_S:
            log.warning("removing a stale extension build lock %s", lock)
            lock.unlink(missing_ok=True)
        built = folder / f"{name}.so"
        loaded = False
        if built.is_file() and not lock.exists():
            # the folder is named by the sources and flags, so a finished build is this one: load it directly
            # (torch's builder would import setuptools and run ninja's up-to-date check: 0.3-0.7 s of every start)
            why = _incomplete(built)
            if why is None:
                try:
                    torch.ops.load_library(str(built))
                    loaded = True
                except OSError as e:
                    why = str(e)
            if not loaded:                         # a link cut short (dlopen of a cut file dies of SIGBUS)
                log.warning("the cached CPU kernels do not load (%s); building them again", why)
                built.unlink(missing_ok=True)
        if not loaded:
            if not built.is_file():                # the first start on this machine waits for the compiler: say so
                log.warning("building the engine's CPU kernels once (about 15 s; cached in %s)", folder)
            t0 = time.monotonic()
            _ninja_on_path()
            cpp_extension.load(name=name, sources=[str(folder / f) for f in _SOURCES], extra_cflags=cflags,
                         extra_ldflags=ldflags, build_directory=str(folder), is_python_module=False, verbose=False)
            if time.monotonic() - t0 > 1.0:
                log.warning("CPU kernels built in %.1f s", time.monotonic() - t0)
        ops = torch.ops.completer_kernels
        # one check against torch before the model trusts it (a miscompiled kernel must not give wrong text)
        g = torch.Generator().manual_seed(0)
        for m, k, n in ((1, 320, 67), (9, 333, 200)):
            x, w = torch.randn(m, k, generator=g), torch.randn(n, k, generator=g).half()
            b, r = torch.randn(n, generator=g), torch.randn(m, n, generator=g)
            nw = torch.rand(k, generator=g) + 0.5
            want = x @ w.float().t() + b + r
            wantn = torch.nn.functional.rms_norm(x, (k,), nw, 1e-5) @ w.float().t()
            if not (torch.allclose(ops.linear_f16(x, ops.pack_f16(w), n, b, r), want, rtol=1e-4, atol=1e-4)
                    and torch.allclose(ops.linear_f16(x, ops.pack_f16(w), n, None, None, nw, 1e-5), wantn,
                                       rtol=1e-4, atol=1e-4)):
                raise RuntimeError("linear_f16 disagrees with torch on a test matrix")
        # attend: 2 new tokens after 3 cached positions, no rotation (cos 1, sin 0), 2 query heads on 1 key head
        qkv, kc, vc = torch.randn(2, 4 * 16, generator=g), torch.randn(1, 8, 16, generator=g), torch.zeros(1, 8, 16)
        vc[:, :3] = torch.randn(1, 3, 16, generator=g)
        y = ops.attend(qkv, torch.ones(2, 16), torch.zeros(2, 16), kc, vc, 3, 2, 1)
        x = qkv.view(2, 4, 16)
        keys, vals = torch.cat([kc[0, :3], x[:, 2]]), torch.cat([vc[0, :3], x[:, 3]])   # what attend wrote too
        for t in range(2):
            for h in range(2):
                p = torch.softmax(keys[:4 + t] @ x[t, h] / 4.0, 0)
                if not torch.allclose(y[t, h * 16:(h + 1) * 16], p @ vals[:4 + t], rtol=1e-4, atol=1e-5):
                    raise RuntimeError("attend disagrees with torch on a test case")
        # linear_q: 4- and 8-bit blocks against their dequantised weights, to the input's int8 rounding
        from completer.models.blocks import dequantise_q, pack_q
        for bits, (m, k, n) in ((4, (3, 64, 40)), (8, (1, 96, 33))):
            u = torch.randint(0, 2 ** bits, (n, k), generator=g, dtype=torch.uint8)
            d, mn = (torch.rand(n, k // 32, generator=g) * 0.01).half(), (torch.randn(n, k // 32, generator=g) * 0.01).half()
            x = torch.randn(m, k, generator=g)
            want = x @ dequantise_q(u, d, mn).t()
            got = ops.linear_q(x, *pack_q(u, d, mn, bits), n, bits)
            if not torch.allclose(got, want, rtol=0.02, atol=0.02 * float(want.abs().max())):
                raise RuntimeError(f"linear_q ({bits} bits) disagrees with the dequantised weights")
        return ops
    except Exception as e:  # noqa: BLE001 - any build failure means: use torch's op
        _state["reason"] = f"{type(e).__name__}: {str(e).strip().splitlines()[-1] if str(e).strip() else ''}"
        return None


def ops() -> object | None:
    """torch.ops.completer_kernels, or None (see ``reason``): ``pack_f16(w [N,K]) -> packed`` and
    ``linear_f16(x [...,K] float32, packed, N, bias=None, residual=None, norm=None, eps=0.0, glu=False)
    -> rms_norm(x, norm, eps) @ w.T + bias + residual`` (no norm when ``norm`` is None; with ``glu`` x is
    [gate, up] and the input silu(gate) * up), and ``attend(qkv, cos, sin, k_cache, v_cache, start, H, Hkv)``:
    rotary, the cache write and causal grouped-query attention of a few new tokens (see matvec.cpp)."""
    with _lock:
        if "op" not in _state:
            _state["op"] = _build()
            if _state["op"] is None:
                log.warning("completer kernels unavailable, using torch's fp16 matmul: %s", _state.get("reason"))
        return _state["op"]  # type: ignore[return-value]


def reason() -> str | None:
    """Why ``ops()`` is None (after it was asked for), else None."""
    return _state.get("reason")  # type: ignore[return-value]
