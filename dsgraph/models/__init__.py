"""Model registry and built-in GNNs."""
