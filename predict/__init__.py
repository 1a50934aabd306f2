"""``python -m predict``: per-node predictions and embeddings (or predicted fields) of a finished
run, computed on the run's own cluster; ``predict.worker`` is one process of that job and
:mod:`predict.output` the file format."""
