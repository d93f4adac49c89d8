"""NumPyro glue over the core: distributions over inducing outputs, subsets and inducing inputs."""
