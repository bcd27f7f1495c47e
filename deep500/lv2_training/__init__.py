"""Level 2: datasets, samplers, optimizers and training. Not implemented yet."""
