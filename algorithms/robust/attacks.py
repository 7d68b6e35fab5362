"""Byzantine attacks on the ``(n, d)`` messages the server receives.

The Byzantine nodes are the last ``K`` node ids, ``n - K .. n - 1``. Each attack maps the rows
the nodes would send if honest (``x``, ``(n, d)``) to the rows the server receives: the honest
rows unchanged, the Byzantine rows replaced by a vector computed from the honest rows, which the
attacker is assumed to see (omniscient, as in the reference code: epfml/byzantine-robust-noniid-
optimizer ``codes/attacks``, SamuelHorvath/VR_Byzantine ``code/attacks``; read, not copied):

* ``bf``, bit flipping: a Byzantine node sends the negation of its own honest row;
* ``ipm``, inner-product manipulation (Xie, Koyejo & Gupta 2020, arXiv 1903.03936): every
  Byzantine node sends ``-eps * mean_G x_i`` (``eps = 0.1``);
* ``alie``, "a little is enough" (Baruch, Baruch & Goldberg 2019, arXiv 1902.06156): every
  Byzantine node sends ``mean_G x_i - z std_G x_i`` (coordinate-wise, unbiased std), ``z`` the
  standard normal quantile of ``(n - s)/n`` with ``s = floor(n/2 + 1) - K``;
* ``lf``, label flipping: the rows are not replaced; the Byzantine nodes compute them on their
  data with the labels negated (:meth:`problems.base.Problem.label_flipped`);
* ``none``: no attack (the Byzantine nodes behave honestly).
"""

from __future__ import annotations

from statistics import NormalDist

import torch

__all__ = ["ATTACKS", "alie_z", "attack", "byzantine_mask"]

#: Attack names on the command line (``--attack``).
ATTACKS = ("none", "bf", "lf", "alie", "ipm")


def byzantine_mask(nodes: torch.Tensor, n: int, K: int) -> torch.Tensor:
    """Whether each of ``nodes`` is Byzantine (``id >= n - K``), bool, same shape."""
    return nodes >= n - K


def alie_z(n: int, K: int) -> float:
    """ALIE's ``z_max`` (Baruch et al. 2019, §3): the largest shift within the honest spread
    that still hides among ``s = floor(n/2 + 1) - K`` supporters."""
    s = n // 2 + 1 - K
    q = (n - s) / n
    if not 0.0 < q < 1.0:
        return 0.0
    return NormalDist().inv_cdf(q)


def attack(
    name: str,
    x: torch.Tensor,
    K: int,
    *,
    ipm_eps: float = 0.1,
    alie: float | None = None,
) -> torch.Tensor:
    """The rows the server receives when the last ``K`` of the ``n`` rows ``x`` are Byzantine
    and run the attack ``name`` (``alie``: ``z``, default :func:`alie_z`)."""
    n = x.shape[0]
    if name in ("none", "lf") or K == 0:
        return x
    honest = x[: n - K]
    if name == "bf":
        bad = -x[n - K :]
    elif name == "ipm":
        bad = (-ipm_eps * honest.mean(dim=0)).expand(K, -1)
    elif name == "alie":
        z = alie_z(n, K) if alie is None else alie
        std = honest.std(dim=0) if honest.shape[0] > 1 else torch.zeros_like(honest[0])
        bad = (honest.mean(dim=0) - z * std).expand(K, -1)
    else:
        raise ValueError(f"attack must be one of {', '.join(ATTACKS)}, got {name!r}")
    return torch.cat([honest, bad.to(x.dtype)])
