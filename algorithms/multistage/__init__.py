"""Multi-stage compression of the residual: NEOLITHIC and its accelerated variant."""
