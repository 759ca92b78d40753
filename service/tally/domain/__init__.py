"""Domain rules in plain Python: ids and keys, event enrichment, metric definitions."""
