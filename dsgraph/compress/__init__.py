"""Activation compression: block-wise INT2 quantization of tensors saved for backward.

Public API: ``compression_context(cfg)`` (what trainers use), ``compressed(cfg)`` /
``Compressor`` (hooks with byte statistics), and the codec ``quantize`` / ``dequantize``.
"""
from dsgraph.compress.codec import (
                                    PackedMask,
                                    QTensor,
                                    QuantSpec,
                                    dequantize,
                                    pack_mask,
                                    packed_nbytes,
                                    quantize,
                                    unpack_mask,
)
from dsgraph.compress.hooks import (
                                    Compressor,
                                    SavedStats,
                                    compressed,
                                    compression_context,
                                    spec_from_config,
)
from dsgraph.compress.levels import int2_levels, optimal_lo
from dsgraph.config import CompressionConfig

__all__ = ["CompressionConfig", "Compressor", "PackedMask", "QTensor", "QuantSpec", "SavedStats",
           "compressed", "compression_context", "dequantize", "int2_levels", "optimal_lo",
           "pack_mask", "packed_nbytes", "quantize", "spec_from_config", "unpack_mask"]
