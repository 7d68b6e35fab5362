"""The node axis: how rows are averaged and what every message costs.

``SimulatedComm`` holds all ``n`` nodes as rows of one process; the torch.distributed backend
holds one node per rank. Algorithms see only the :class:`Comm` interface.
"""

import streams  # noqa: F401  (first: sets the OpenMP spin policy before torch loads)
from comm.base import Comm, Ledger
from comm.simulated import SimulatedComm

__all__ = ["Comm", "Ledger", "SimulatedComm"]
