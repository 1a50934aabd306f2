"""The command-line programs (entry points dsgraph-partition, dsgraph-train, dsgraph-predict;
python -m partition|train|predict from a checkout)."""
