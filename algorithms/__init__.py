"""The methods: each one a file, grouped by family, over a state of rows; the registry.

Families (subpackages): ``ef`` (error feedback: EF14, EF21 and its variants, 3PC, EF-BV,
AdaCGD), ``shifts`` (unbiased compression with learned shifts: DCGD, DIANA, ADIANA, CANITA,
the matrix-smoothness methods, CAFe), ``vr`` (variance reduction: MARINA, DASHA and their
variants), ``bidirectional`` (DORE, Artemis, MCM, EF21-BC), ``absolute`` (EC-SGD, EC-LSVRG),
``momentum`` (COMP-AMS, GMC, LIEC-SGD), ``multistage`` (NEOLITHIC), ``local``
(CompressedScaffnew), ``second_order`` (FedNL, Newton-3PC), ``byzantine`` (the robust methods;
their aggregators and attacks in ``robust``). ``base`` is the interface, ``registry`` the names,
``stepsizes`` the theory steps.

The layers: methods sit on the comm layer (:mod:`comm`), the compressors and the problems'
interface; the runner (:mod:`runner`) sits on them. ``python -m algorithms.run`` and
:mod:`algorithms.api` are the runner's public entry points, kept under their names.
"""

import streams  # noqa: F401  (first: sets the OpenMP spin policy before torch loads)
