"""When does gradient compression pay? Measured encode/decode cost and a performance model.

- :mod:`systems.pays`: ``python -m systems.pays``, the one-command answer: per DDP hook the
  predicted iteration time and speed-up over fp16 all-reduce on a cluster of ``--gpus`` workers
  at ``--bandwidth``, from the hooks' declared collectives, DDP's buckets, a measured backward
  profile and encode/decode timed here (:mod:`systems.hookcodec`, :mod:`systems.nets`).
- :mod:`systems.hooks`: the DDP communication hooks (library and PyTorch's own), overlapping the
  backward pass, each declaring its collectives.
- :mod:`systems.layers`: parameter shapes of the models asked about.
- :mod:`systems.measure`: encode/decode time of a compressor on this machine, cached.
- :mod:`systems.model`: iteration time of synchronous SGD and of a hook, as per-bucket pipelines
  (Agarwal et al., MLSys 2022, arXiv 2103.00543).
- :mod:`systems.netstudy`: ``python -m systems.netstudy``, the hooks measured over throttled
  links in network namespaces (:mod:`systems.netns`, :mod:`systems.linkprobe`,
  :mod:`systems.nettestbed`, :mod:`systems.networker`, the shipped task :mod:`systems.teacher`).
- :mod:`systems.paper`: the paper's findings recomputed from the model (fitted inputs).
- :mod:`systems.utility`: ``python -m systems.utility``, the table per compressor.
- :mod:`systems.validate`: the model against measured torch.distributed (gloo) runs.
"""

import streams  # noqa: F401  (first: sets the OpenMP spin policy before torch loads)
