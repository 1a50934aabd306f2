"""``python -m partition``: the partitioning CLI (the code lives in :mod:`dsgraph.partition`)."""
