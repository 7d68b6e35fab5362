"""Decentralized (peer-to-peer) methods: every node keeps its own iterate and averages with its
neighbours in a graph (:mod:`comm.topology`) through the comm layer's gossip; no server."""
