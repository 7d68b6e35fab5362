"""Agarwal et al. (MLSys 2022) findings, recomputed by the model from the paper's setting."""

import numpy as np

from systems import paper
from systems.layers import model_shapes


def test_powersgd_loses_above_about_9_gbps():
    be = paper.powersgd_crossover()
    # 9.31 Gbit/s with the (fitted, circular) inputs of systems.paper; 9.46 before the model
    # had DDP's 1 MiB first bucket
    assert 8.0 < be < 11.0
    assert paper.powersgd_speedup(5.0) > 1.0 > paper.powersgd_speedup(25.0)
    assert paper.powersgd_speedup(100.0) < 1.0


def test_faster_compute_makes_powersgd_pay():
    fast = float(paper.powersgd_speedup(10.0, speedup=4.0))
    assert (
        1.5 < fast < 2.0
    )  # about 1.75x in the paper; 1.66 here (1.73 before the 1 MiB first bucket)
    assert fast > float(paper.powersgd_speedup(10.0, speedup=1.0))
    assert paper.powersgd_crossover(speedup=4.0) > 2 * paper.powersgd_crossover()


def test_sign_methods_scale_badly_with_workers():
    workers = [8, 16, 32, 64, 128]
    sign = np.array([float(paper.signsgd_speedup(p, 10.0)) for p in workers])
    power = np.array([float(paper.powersgd_speedup(10.0, workers=p)) for p in workers])
    assert np.all(np.diff(sign) < 0)
    assert sign[-2] < 0.7 and sign[-1] < 0.5  # 0.57 at 64, 0.38 at 128 workers
    # all-reduce keeps PowerSGD nearly flat in p while all-gather drags signSGD down
    assert power[-1] / power[0] > 0.95 > 0.5 > sign[-1] / sign[0]


def test_powersgd_bits_by_hand():
    # a (64, 3, 7, 7) conv is 64 x 147: rank 4 sends 4 * (64 + 147) floats; vectors go whole
    assert paper.powersgd_bits([(64, 3, 7, 7), (64,)], r=4) == 32 * (4 * 211 + 64)
    assert paper.powersgd_bits([(2, 3)], r=4) == 32 * 6  # never more than the matrix
    assert paper.powersgd_bits(model_shapes("resnet50"), r=4) == 32 * 384084
