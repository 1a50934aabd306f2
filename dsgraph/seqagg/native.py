"""Fused C kernels of the attention kernels (``attention.c``, a :class:`dsgraph.native.CLibrary`):
per-edge dots, the weighted scatter of the fold and the weighted gather of the rows' gradient,
each in one pass with no edges x row-width tensor. :func:`usable` says when they apply
(float32, contiguous, CPU, compiled); :mod:`dsgraph.seqagg.kernels` falls back to its torch
path otherwise (and inside :func:`disabled`).
"""
from __future__ import annotations

import ctypes
import math
from pathlib import Path

import torch

from dsgraph.native import CLibrary, parallel

_i64, _ptr = ctypes.c_int64, ctypes.c_void_p
_LIB = CLibrary(Path(__file__).with_name("attention.c"), "sqa", {
    "sqa_edge_dots": (None, [_ptr, _ptr, _ptr, _ptr, _i64, _i64, _i64, _i64, _ptr]),
    "sqa_scatter_weighted": (None, [_ptr, _ptr, _ptr, _ptr, _i64, _i64, _i64, _ptr]),
    "sqa_gather_weighted": (None, [_ptr, _ptr, _ptr, _ptr, _i64, _i64, _i64, _i64, _ptr]),
})
available, disabled, failure = _LIB.available, _LIB.disabled, _LIB.failure


def usable(*tensors: torch.Tensor) -> bool:
    """Whether the kernels can take these row tensors: float32, contiguous, CPU, compiled."""
    return all(t.device.type == "cpu" and t.dtype == torch.float32 and t.is_contiguous()
               for t in tensors) and available()


def _ids(t: torch.Tensor) -> torch.Tensor:
    return t.to(torch.int64).contiguous()


def edge_dots(rows: torch.Tensor, gout: torch.Tensor, u: torch.Tensor,
              v: torch.Tensor) -> torch.Tensor:
    """``<rows[u_e, h], gout[v_e, h]>`` per edge ``e`` and head ``h``: edges x heads (rows and
    ``gout``: n x heads x F)."""
    heads, f = rows.shape[1], math.prod(rows.shape[2:])
    u, v = _ids(u), _ids(v)
    dots = torch.empty((u.numel(), heads), dtype=torch.float32)
    lib = _LIB.library()
    parallel(u.numel() * heads * f, u.numel(), 1, lambda e0, e1: lib.sqa_edge_dots(
        rows.data_ptr(), gout.data_ptr(), u.data_ptr(), v.data_ptr(), e0, e1, heads, f,
        dots.data_ptr()))
    return dots


def scatter_weighted(acc: torch.Tensor, rows: torch.Tensor, p: torch.Tensor, u: torch.Tensor,
                     v: torch.Tensor) -> None:
    """``acc[v_e, h] += p[e, h] * rows[u_e, h]`` for every edge ``e`` (in place; one thread:
    edges share destinations)."""
    heads, f = rows.shape[1], math.prod(rows.shape[2:])
    u, v, p = _ids(u), _ids(v), p.contiguous()
    _LIB.library().sqa_scatter_weighted(rows.data_ptr(), p.data_ptr(), u.data_ptr(),
                                        v.data_ptr(), u.numel(), heads, f, acc.data_ptr())


def gather_weighted(out: torch.Tensor, gout: torch.Tensor, att: torch.Tensor,
                    row_ptr: torch.Tensor, v: torch.Tensor) -> None:
    """``out[r, h] += sum_e att[e, h] * gout[v_e, h]`` over each row ``r``'s edges (edges
    sorted by row, ``row_ptr``: rows + 1 offsets), in place."""
    heads, f = out.shape[1], math.prod(out.shape[2:])
    row_ptr, v, att = _ids(row_ptr), _ids(v), att.contiguous()
    lib = _LIB.library()
    parallel(v.numel() * heads * f, out.shape[0], 1, lambda r0, r1: lib.sqa_gather_weighted(
        gout.data_ptr(), att.data_ptr(), row_ptr.data_ptr(), v.data_ptr(), r0, r1, heads, f,
        out.data_ptr()))
