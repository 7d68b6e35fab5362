"""Methods as init/step over a state of rows, the registry, the comm layer and the runner."""
