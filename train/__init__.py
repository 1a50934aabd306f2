"""`python -m train` from a checkout: runs dsgraph.cli.train (installed: dsgraph-train)."""
