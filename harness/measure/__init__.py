"""Measuring an attack: the QueryTracker and its parts, success, distances, the minimal-ε search."""
