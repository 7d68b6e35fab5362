"""When does gradient compression pay? Measured encode/decode cost and a performance model.

- :mod:`systems.layers`: parameter shapes of ResNet-50/101 and BERT-base.
- :mod:`systems.measure`: encode/decode time of a compressor on this machine, cached.
- :mod:`systems.model`: iteration time of synchronous SGD against a compressed method
  (Agarwal et al., MLSys 2022, arXiv 2103.00543).
- :mod:`systems.paper`: the paper's findings recomputed from the model.
- :mod:`systems.utility`: ``python -m systems.utility``, the table per compressor.
- :mod:`systems.validate`: the model against measured torch.distributed (gloo) runs.
"""

import streams  # noqa: F401  (first: sets the OpenMP spin policy before torch loads)
