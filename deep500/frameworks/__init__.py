"""Framework bridges: ``reference`` (NumPy), ``pytorch``, ``tensorflow``."""
