"""Low-rank methods: rank-r factors of each node's gradient, viewed as a near-square matrix,
exchanged through the comm layer (PowerSGD+, LASER)."""
