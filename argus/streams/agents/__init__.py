"""Faust agents of each worker role (thin shells over the pure cores)."""
