"""Compress every tensor autograd saves for backward, for any model, via ``saved_tensors_hooks``.

Inside ``with compressed(cfg) as c: loss = model(...)`` each tensor an op saves for backward goes
through :meth:`Compressor.pack`; backward later calls :meth:`Compressor.unpack` on the result.
What happens to a saved tensor:

* parameters and views of them (leaf tensors that require grad), integer tensors and tensors with
  fewer than ``min_numel`` values: kept as they are (compressing a parameter frees nothing);
* the output of ReLU, saved by ReLU itself: a lossless 1-bit mask (its backward only needs
  ``out > 0``; INT2 rounding would send small positive values to 0 and corrupt the gradient);
* the input of ``leaky_relu`` (GAT attention logits): a 1-bit sign mask, for the same reason;
* saves of an autograd Function that declares how they may be stored (``save_policy``, see
  :mod:`dsgraph.savepolicy`, which also lists third-party Functions such as DGL's edge softmax):
  ``EXACT`` kept as is, ``NONLINEAR`` (backward non-linear in it: rounding noise would turn into
  gradient bias at INT2) INT8, ``BIT_MASK`` (an already packed uint8 mask) kept as is;
* the outputs of sigmoid and tanh, whose backward is non-linear in them: INT8 too;
* the output of softmax / log-softmax (a loss computed inside the context: cross-entropy saves
  its log-softmax and backward takes exp of it): kept exact, so the loss may be computed inside
  or outside the context with the same, unbiased gradients;
* tensors holding only {0, c} that need no grad (CPU dropout masks) and bool masks: 1-bit, lossless
  (on CPU float32, ReLU and dropout are swapped for ops that save their 1-bit mask directly:
  :mod:`dsgraph.compress.masked_ops`);
* per-node scalars that need no grad (shape (N, 1): degree normalisers that backward divides by,
  where rounding would bias 1/x): kept exact;
* every other float tensor: block-wise (or row-wise) INT2 with unbiased stochastic rounding.
  With ``projection`` < 1, EXACT's random projection is applied only to inputs of linear maps
  (``F.linear``, ``matmul``, ``mm``, ``addmm``), whose backward is linear in them so the projected
  estimate stays unbiased; other tensors are quantized unprojected.

Which op is saving comes from the declared policies and from one ``TorchFunctionMode`` (the
Compressor's, which also routes ReLU/dropout to :mod:`dsgraph.compress.masked_ops`) recording
the running ``leaky_relu`` or linear map; no stack frames or op names of other packages.

A tensor saved by several ops (a layer input feeding two linear maps, ReLU output feeding the next
layer) is packed once per role: packs are cached by (storage, offset, shape, stride, version) and
a weak reference guards against a freed storage's address being reused by a new tensor.
``stats`` counts the bytes held for backward, de-duplicated by storage, next to what plain fp32
autograd would hold for the same tensors. ``measure_only=True`` packs nothing (identity) but
counts the same way: the fp32 baseline.
"""
from __future__ import annotations

import contextlib
import dataclasses
import time
import weakref
from typing import Any, ContextManager, Iterable, Optional

import torch
import torch.nn.functional as F

from dsgraph.compress.codec import (
    STATS_DTYPES,
    PackedMask,
    QTensor,
    QuantSpec,
    dequantize,
    pack_mask,
    pack_positive,
    pack_two_valued,
    quantize,
    unpack_mask,
)
from dsgraph.compress.masked_ops import ROUTED_FUNCS, MaskedActivations
from dsgraph.compress.pool import BufferPool
from dsgraph.compress.stats import SavedStats
from dsgraph.config import CompressionConfig
from dsgraph.errors import ConfigError
from dsgraph.savepolicy import SaveKind, saving_policy

# Ops whose backward needs only the sign of the output they save.
SIGN_ONLY_OUTPUTS = frozenset({"ReluBackward0", "ThresholdBackward0"})
# torch functions whose saved input is only used for its sign (leaky_relu: slope 1 or alpha),
# matched by identity in the Compressor's TorchFunctionMode (a tuple: ``in`` needs no hashing).
SIGN_ONLY_INPUT_FUNCS = (F.leaky_relu,)
# Ops saving their own output whose backward is non-linear in it: y(1-y), 1-y^2 -> INT8.
NONLINEAR_OUTPUTS = frozenset({"SigmoidBackward0", "TanhBackward0"})
# Bits for those and for saves declared SaveKind.NONLINEAR (dsgraph.savepolicy).
NONLINEAR_BITS = 8
# Ops saving their own output for backward through exp(out) (a log-softmax inside the loss):
# kept exact (measured with the loss inside the context at INT2: sampled SAGE accuracy 0.45
# instead of 0.65).
EXACT_OUTPUTS = frozenset({"LogSoftmaxBackward0", "SoftmaxBackward0"})
# Functions whose first matrix operand is saved only for a gradient linear in it (projection ok).
LINEAR_FUNCS = {"linear": 0, "matmul": 0, "mm": 0, "__matmul__": 0, "addmm": 1}
# Roles whose pack serves any other role's consumer too (more exact than INT-b values).
_SHARED_ROLES = ("exact", "nonlinear")


class _Handle:
    """What autograd stores instead of a tensor: a packed form and how to rebuild it."""

    __slots__ = ("packed",)

    def __init__(self, packed: QTensor | PackedMask) -> None:
        self.packed = packed


class _Entry:
    """Packs of one saved tensor, one per role, plus a weak reference proving it is still alive."""

    __slots__ = ("ref", "roles", "two_valued")

    def __init__(self, t: torch.Tensor) -> None:
        self.ref = weakref.ref(t)
        self.roles: dict[str, _Handle | torch.Tensor] = {}
        self.two_valued: Optional[PackedMask] | bool = False  # False = not tested yet


def spec_from_config(cfg: CompressionConfig) -> QuantSpec:
    """The codec settings of a ``compression`` config section (ConfigError if inconsistent)."""
    if cfg.levels == "optimal" and cfg.bits != 2:
        raise ConfigError(f"compression.levels: 'optimal' needs compression.bits 2, got {cfg.bits}")
    block = cfg.block_size if cfg.granularity == "block" else 0
    return QuantSpec(cfg.bits, block, cfg.levels, STATS_DTYPES[cfg.stats_dtype], cfg.projection)


def _declared_kind(t: torch.Tensor) -> SaveKind:
    """What the Function saving ``t`` now declared for it (:mod:`dsgraph.savepolicy`), or AUTO."""
    policy = saving_policy(t)
    return SaveKind.AUTO if policy is None else policy.kind(t)


def _is_parameter(t: torch.Tensor) -> bool:
    base = t._base if t._base is not None else t
    return base.is_leaf and base.requires_grad


class _RunningOps(MaskedActivations):
    """The Compressor's one TorchFunctionMode: ReLU and dropout routed to the 1-bit-mask ops (the
    base class), and a record of the running torch function where it decides how its saves are
    stored: a sign-only function (``sign_input``) and, if ``track_linear``, the matrix operand of
    the running linear map (where projection is unbiased).

    Inside ``__torch_function__`` this mode is off, so calls do not nest: ``func`` runs the op
    whose saves the hooks see while the record is set.
    """

    def __init__(self, min_numel: int, track_linear: bool) -> None:
        super().__init__(min_numel)
        self.track_linear = track_linear
        self.sign_input = False  # the running function uses its saved input only for its sign
        self.linear_input: Optional[torch.Tensor] = None

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if func in ROUTED_FUNCS:  # (none of them is recorded)
            return super().__torch_function__(func, types, args, kwargs)
        if func in SIGN_ONLY_INPUT_FUNCS:
            prev_sign, self.sign_input = self.sign_input, True
            try:
                return func(*args, **(kwargs or {}))
            finally:
                self.sign_input = prev_sign
        if self.track_linear:
            pos = LINEAR_FUNCS.get(getattr(func, "__name__", ""))
            if pos is not None and len(args) > pos and isinstance(args[pos], torch.Tensor):
                prev = self.linear_input
                self.linear_input = args[pos] if args[pos].dim() == 2 else None
                try:
                    return func(*args, **(kwargs or {}))
                finally:
                    self.linear_input = prev
        return func(*args, **(kwargs or {}))

    def is_linear_input(self, t: torch.Tensor) -> bool:
        """True if ``t`` is the matrix operand of the running linear map."""
        c = self.linear_input
        return (c is not None and c.data_ptr() == t.data_ptr() and c.shape == t.shape
                and c.stride() == t.stride())


class Compressor:
    """A ``saved_tensors_hooks`` context that compresses saved activations; see the module doc."""

    def __init__(self, cfg: CompressionConfig, *, measure_only: bool = False,
                 seed: Optional[int] = None, exclude: Iterable[torch.Tensor] = ()) -> None:
        self.spec = spec_from_config(cfg)
        self.spec_nonlinear = dataclasses.replace(
            self.spec, bits=max(self.spec.bits, NONLINEAR_BITS), levels="uniform", projection=1.0)
        # Projection only where unbiased: inputs of linear maps (found by _RunningOps).
        self.spec_projected = self.spec
        self.spec = dataclasses.replace(self.spec, projection=1.0)
        self.min_numel = cfg.min_numel
        self.measure_only = measure_only
        # ReLU/dropout that save 1-bit masks directly (the fp32 baseline keeps torch's own), and
        # the running function where roles depend on it (measure_only decides no roles).
        self._ops = None if measure_only else _RunningOps(
            cfg.min_numel, track_linear=self.spec_projected.projection < 1)
        if seed is None:
            # Fresh randomness for every step, reproducible under torch.manual_seed.
            seed = cfg.seed * 1_000_003 + int(torch.randint(0, 2 ** 31, (1,)).item())
        self.seed = seed
        self._exclude = {p.untyped_storage().data_ptr() for p in exclude}
        self._generators: dict[torch.device, torch.Generator] = {}
        self._entries: dict[tuple, _Entry] = {}
        self._storages: dict[int, weakref.ref] = {}
        self._hooks: Optional[ContextManager] = None
        self._pool = BufferPool()
        self._outstanding = 0  # handles given to autograd and not yet unpacked
        self.stats = SavedStats()

    def __enter__(self) -> "Compressor":
        self._hooks = torch.autograd.graph.saved_tensors_hooks(self.pack, self.unpack)
        self._hooks.__enter__()
        if self._ops is not None:
            self._ops.__enter__()
        return self

    def __exit__(self, *exc: Any) -> None:
        assert self._hooks is not None
        if self._ops is not None:
            self._ops.__exit__(*exc)
        self._hooks.__exit__(*exc)
        self._hooks = None
        # Packs stay referenced by the autograd graph; the lookup tables are only for the forward.
        self._entries.clear()
        self._storages.clear()

    def _generator(self, device: torch.device) -> torch.Generator:
        gen = self._generators.get(device)
        if gen is None:
            gen = torch.Generator(device=device)
            gen.manual_seed(self.seed)
            self._generators[device] = gen
        return gen

    def _count_storage(self, t: torch.Tensor, held: bool) -> None:
        """Add ``t``'s storage to fp32_bytes (and saved_bytes if ``held``) once per live storage."""
        storage = t.untyped_storage()
        ptr = storage.data_ptr()
        ref = self._storages.get(ptr)
        if ref is not None and ref() is not None:
            return
        self._storages[ptr] = weakref.ref(t)
        self.stats.fp32_bytes += storage.nbytes()
        if held:
            self.stats.saved_bytes += storage.nbytes()

    def pack(self, t: torch.Tensor) -> Any:
        """saved_tensors_hooks pack: return ``t`` itself or a compressed handle."""
        t0 = time.perf_counter()
        try:
            return self._pack(t)
        finally:
            self.stats.pack_s += time.perf_counter() - t0

    def _pack(self, t: torch.Tensor) -> Any:
        st = self.stats
        st.pack_calls += 1
        if _is_parameter(t) or t.untyped_storage().data_ptr() in self._exclude:
            st.parameters += 1
            return t
        if t.dtype == torch.uint8 and _declared_kind(t) is SaveKind.BIT_MASK:
            # Already a 1-bit mask (masked_ops); plain autograd would have held float32 values.
            st.masks += 1
            st.saved_bytes += t.untyped_storage().nbytes()
            st.fp32_bytes += 32 * t.numel()
            return t
        if self.measure_only or t.numel() < self.min_numel or not (
                t.is_floating_point() or t.dtype == torch.bool):
            st.exact += 1
            self._count_storage(t, held=True)
            return t
        key = (t.untyped_storage().data_ptr(), t.storage_offset(), tuple(t.shape), t.stride(),
               t._version, t.dtype, t.device)
        entry = self._entries.get(key)
        first = entry is None or entry.ref() is None
        if first:
            entry = self._entries[key] = _Entry(t)
            self._count_storage(t, held=False)
        assert entry is not None
        role, make = self._role(t, entry, first)
        handle = entry.roles.get(role)
        if handle is None and role.startswith("values"):
            handle = next((entry.roles[r] for r in _SHARED_ROLES if r in entry.roles), None)
        if handle is not None:
            st.cache_hits += 1
            if not isinstance(handle, torch.Tensor):
                self._outstanding += 1
            return handle
        handle = make()
        entry.roles[role] = handle
        if isinstance(handle, torch.Tensor):
            st.exact += 1
            st.saved_bytes += handle.untyped_storage().nbytes()
        else:
            self._outstanding += 1
            st.saved_bytes += handle.packed.nbytes
            if isinstance(handle.packed, PackedMask):
                st.masks += 1
            else:
                st.quantized += 1
                st.quantized_bytes += handle.packed.nbytes
        return handle

    def _role(self, t: torch.Tensor, entry: _Entry, first: bool) -> tuple[str, Any]:
        """Decide how ``t`` is stored: (role name, function building its pack)."""
        if t.dtype == torch.bool:
            return "mask", lambda: _Handle(pack_mask(t, 1.0, torch.bool))
        grad_fn = type(t.grad_fn).__name__ if t.grad_fn is not None else ""
        kind = _declared_kind(t)
        ops = self._ops
        # The first save of a ReLU output is ReLU's own (it saves its result while running).
        if (first and grad_fn in SIGN_ONLY_OUTPUTS) or (ops is not None and ops.sign_input):
            return "sign", lambda: _Handle(pack_positive(t))
        if (first and grad_fn in EXACT_OUTPUTS) or kind is SaveKind.EXACT:
            return "exact", lambda: t
        if kind is SaveKind.NONLINEAR or (first and grad_fn in NONLINEAR_OUTPUTS):
            return "nonlinear", lambda: _Handle(quantize(t, self.spec_nonlinear,
                                                         self._generator(t.device)))
        if not t.requires_grad:
            if entry.two_valued is False:
                # A {0, c} tensor (CPU dropout mask) is tested and packed in one go.
                entry.two_valued = pack_two_valued(t)
            mask = entry.two_valued
            if mask is not None:
                return "mask", lambda: _Handle(mask)
            if t.dim() >= 2 and t.numel() == t.shape[0]:
                return "exact", lambda: t
        if ops is not None and ops.track_linear and ops.is_linear_input(t):
            return "values_projected", lambda: _Handle(quantize(t, self.spec_projected,
                                                                self._generator(t.device)))
        return "values", lambda: _Handle(quantize(t, self.spec, self._generator(t.device)))

    def unpack(self, packed: Any) -> torch.Tensor:
        """saved_tensors_hooks unpack: rebuild the tensor backward needs."""
        if isinstance(packed, torch.Tensor):
            return packed
        t0 = time.perf_counter()
        p = packed.packed
        buffer = self._pool.get if p.dtype == torch.float32 else None
        out = unpack_mask(p, buffer) if isinstance(p, PackedMask) else dequantize(p, buffer)
        self._outstanding -= 1
        if self._outstanding <= 0:
            self._pool.clear()  # backward is done with this step's packs
        self.stats.unpack_s += time.perf_counter() - t0
        return out


def compressed(cfg: CompressionConfig, *, measure_only: bool = False, seed: Optional[int] = None,
               exclude: Iterable[torch.Tensor] = ()) -> Compressor:
    """A context manager compressing saved activations per ``cfg`` (``.stats`` has the bytes)."""
    return Compressor(cfg, measure_only=measure_only, seed=seed, exclude=exclude)


def compression_context(cfg: CompressionConfig) -> ContextManager:
    """What trainers wrap their forward pass in: ``compressed(cfg)`` if enabled, else a no-op."""
    return compressed(cfg) if cfg.enabled else contextlib.nullcontext()
