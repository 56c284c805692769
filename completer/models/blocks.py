"""A GGUF file's own 4/8-bit blocks (Q4_0, Q4_1, Q8_0) as the engine's block kernel reads them
(completer/models/qmatvec.cpp: ``linear_q``): read from the file's raw bytes (``gguf_blocks``), laid out for the kernel
(``pack_q``), dequantised (``dequantise_q``: the reference the kernel's tests compare with; ``unpack_rows``: an
embedding lookup in the packed weights). Every weight is ``d * u + m`` per block of 32 inputs.
"""

from __future__ import annotations

import torch

QK = 32                                        # weights per block along the input dimension
GGUF_BLOCKS = {"Q4_0": (18, 4), "Q4_1": (20, 4), "Q8_0": (34, 8)}   # GGUF type -> (bytes per block, bits of u)


def gguf_blocks(data, kind: str, rows: int, cols: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """A GGUF tensor's raw blocks (``ReaderTensor.data``, [rows, bytes per row] uint8) of type ``kind`` (a key of
    GGUF_BLOCKS) as ``(u, d, m, bits)``: every weight is ``d * u + m`` per block of 32 inputs, u uint8 [rows, cols]
    (0..15 for 4 bits, 0..255 for 8), d and m float16 [rows, cols / 32]. Exact: Q4_1 is stored so (d, m, nibbles);
    Q4_0's nibble n means (n - 8) d, so m = -8d; Q8_0's int8 q means q d, so u = q + 128 and m = -128d (float16
    products by powers of two are exact)."""
    import numpy as np

    size, bits = GGUF_BLOCKS[kind]
    if cols % QK:
        raise ValueError(f"{cols} columns do not split into blocks of {QK}")
    b = np.ascontiguousarray(np.asarray(data, dtype=np.uint8)).reshape(rows, cols // QK, size)
    d = b[..., 0:2].copy().view(np.float16)[..., 0]
    if kind == "Q4_1":
        m, qs = b[..., 2:4].copy().view(np.float16)[..., 0], b[..., 4:20]
    elif kind == "Q4_0":
        m, qs = (d * np.float16(-8)).astype(np.float16), b[..., 2:18]
    else:
        m = (d * np.float16(-128)).astype(np.float16)
        u = (b[..., 2:34].view(np.int8).astype(np.int16) + 128).astype(np.uint8)
    if bits == 4:                               # byte i of a block: element i (low nibble) and i + 16 (high)
        u = np.concatenate([qs & 0x0F, qs >> 4], axis=-1)
    return (torch.from_numpy(np.ascontiguousarray(u).reshape(rows, cols)), torch.from_numpy(np.ascontiguousarray(d)),
            torch.from_numpy(np.ascontiguousarray(m)), bits)


def dequantise_q(u: torch.Tensor, d: torch.Tensor, m: torch.Tensor) -> torch.Tensor:
    """The float32 weights [rows, cols] of blocks ``(u, d, m)`` (see ``gguf_blocks``)."""
    rows, cols = u.shape
    x = u.float().view(rows, cols // QK, QK) * d.float()[..., None] + m.float()[..., None]
    return x.view(rows, cols)


def pack_q(u: torch.Tensor, d: torch.Tensor, m: torch.Tensor, bits: int) -> tuple[torch.Tensor, ...]:
    """Blocks ``(u, d, m)`` in the layout of the engine's ``linear_q`` kernel (completer/models/qmatvec.cpp):
    rows in groups of 16 (padded with zero rows), per group and block of 32 inputs 64-byte chunks whose 4-byte lane r
    holds row r's u for 4 consecutive inputs (4 bits: two inputs per byte, see there); d and m [groups, blocks, 16].
    Returns (w uint8 [G, blocks, 16*32*bits/8], wd, wm float16 [G, blocks, 16])."""
    import numpy as np                              # numpy's strided copies of uint8 are ~10x torch's here

    rows, cols = u.shape
    nb, groups = cols // QK, -(-rows // 16)
    un, dn, mn = u.numpy(), d.half().numpy(), m.half().numpy()
    pad = groups * 16 - rows
    if pad:
        un = np.concatenate([un, np.zeros((pad, cols), np.uint8)])
        dn, mn = (np.concatenate([a, np.zeros((pad, nb), np.float16)]) for a in (dn, mn))
    if bits == 8:
        w = un.reshape(groups, 16, nb, 8, 4).transpose(0, 2, 3, 1, 4)            # [G, nb, t, r, i]
    elif bits == 4:
        v = un.reshape(groups, 16, nb, 4, 2, 4).transpose(0, 2, 3, 4, 1, 5)      # [G, nb, j, half, r, i]
        w = v[:, :, :, 0] | (v[:, :, :, 1] << 4)
    else:
        raise ValueError(f"bits must be 4 or 8, got {bits}")
    scales = lambda a: torch.from_numpy(np.ascontiguousarray(a.reshape(groups, 16, nb).transpose(0, 2, 1)))  # noqa: E731
    return (torch.from_numpy(np.ascontiguousarray(w).reshape(groups, nb, 16 * QK * bits // 8)), scales(dn),
            scales(mn))


def unpack_rows(w: torch.Tensor, wd: torch.Tensor, wm: torch.Tensor, bits: int, ids: torch.Tensor) -> torch.Tensor:
    """Rows ``ids`` of packed blocks (``pack_q``'s output) dequantised to float32 [len(ids), cols]: an embedding
    lookup in the weights the tied output matmul reads, with no second copy."""
    groups, nb, _ = w.shape
    g, r = ids // 16, ids % 16
    if bits == 8:
        u = w.view(groups, nb, 8, 16, 4)[g, :, :, r, :].reshape(-1, nb, QK)
    else:
        byte = w.view(groups, nb, 4, 16, 4)[g, :, :, r, :]                       # [n, nb, j, i]
        u = torch.stack([byte & 0x0F, byte >> 4], dim=-2).reshape(-1, nb, QK)
    x = u.float() * wd[g, :, r].float()[..., None] + wm[g, :, r].float()[..., None]
    return x.reshape(-1, nb * QK)
