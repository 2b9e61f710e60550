"""The result row schema, the run's parameter table and the run directory store."""
