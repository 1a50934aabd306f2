"""Activation compression: block-wise INT2 quantization of tensors saved for backward."""
