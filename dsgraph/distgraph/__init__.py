"""Sampled training over DistGraph: halo-cached feature reads and distributed evaluation."""
