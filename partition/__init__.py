"""`python -m partition` from a checkout: runs dsgraph.cli.partition (installed: dsgraph-partition);
`python -m partition.chunk` runs dsgraph.cli.chunk."""
