"""SAR: full-batch sequential aggregation and rematerialization."""
