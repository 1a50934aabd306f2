"""`python -m predict` from a checkout: runs dsgraph.cli.predict (installed: dsgraph-predict)."""
