"""The result row schema and the run directory store."""
