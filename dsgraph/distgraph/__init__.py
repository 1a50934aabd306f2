"""Sampled training over DistGraph: halo-cached feature reads, local-halo neighbour sampling and
distributed evaluation."""
