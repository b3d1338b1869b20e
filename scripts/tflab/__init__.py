"""tflab: a Docker Compose lab for TensorFlow multi-node training on one machine."""
