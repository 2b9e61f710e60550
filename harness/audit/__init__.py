"""Release audits: per-version environments, resolution, bisection, the audit command."""
