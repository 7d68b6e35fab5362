"""The node axis: how rows are averaged and what every message costs.

``SimulatedComm`` holds all ``n`` nodes as rows of one process; the torch.distributed backend
holds one node per rank. Algorithms see only the :class:`Comm` interface.
"""

from algorithms.comm.base import Comm, Ledger
from algorithms.comm.simulated import SimulatedComm

__all__ = ["Comm", "Ledger", "SimulatedComm"]
