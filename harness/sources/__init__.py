"""Where models and data come from: the zoo, checkpoints, architectures, datasets, twins."""
