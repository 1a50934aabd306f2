"""Predictions of a finished run (the command: :mod:`dsgraph.cli.predict`)."""
