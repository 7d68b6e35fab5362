"""Every stream tag of the project, by layer.

A tag separates independent uses of randomness: ``Streams.shared(seed, 1, X0)``,
``rng.split(FOSGD_SIGNS)``, ``comm.rng(t, tag=BATCH)``,
``np.random.default_rng([seed, SPLIT_IID])``. The values key the random streams, so changing one
changes the numbers of every run that draws from it: they are fixed. Modules that draw for the
same purpose share one name (``BATCH``: DCGD and the variance-reduced methods draw the same
minibatches); distinct purposes have distinct values (``tests/test_stream_tags.py``).
:class:`streams.Streams` reduces a tag modulo ``2**64`` and NumPy's seed sequences take
non-negative integers, so every tag lies in ``[0, 2**63)``.

A family is a base plus an index (``NEOLITHIC_MSC + r`` for stage ``r``); :data:`SPANS` gives
how many consecutive values each family may take. Small ordinals that tell apart the draws of
one caller are not listed here: Compose's stages (``rng.split(1)`` and ``rng.split(2)`` of the
compressor's own streams) and the DDP hook's buckets (bucket ``b`` passes tag ``b`` to its Comm,
which draws nothing else).
"""

from __future__ import annotations

# ------------------------------------------------------------------ streams
NORMAL_RADIUS = 0x6E01  # streams.Streams.normal: Box-Muller's first uniform (the radius)
NORMAL_ANGLE = 0x6E02  # streams.Streams.normal: Box-Muller's second uniform (the angle)

# ------------------------------------------------------------------ comm (algorithms/comm)
# The roots of Comm's streams come first in a key, ``(seed, root, tag, t[, node])``; the other
# algorithm tags are the ``tag`` a method passes to Comm.rng, rng_for, coin or server_rng.
DEFAULT = 0  # comm/base.Comm's tag when a caller names none: a method's main compressor draws
NODE = 0x4E0D  # comm/base.Comm.rng: root of each node's private streams
SHARED = 0x5A4D  # comm/base.Comm.rng(shared=True): root of the streams all nodes share
SERVER = 0x5E2F  # comm/base.Comm.coin and server_rng: root of the server's streams
DDP_LAYER = 1 << 40  # comm/ddp_hook.stream_tag, layerwise: bucket b's slice j, + b 2**20 + j

# ------------------------------------------------------------------ compressors
PERMK_SHIFT = 0x5EED  # perm_k: the shared shift of the nodes' blocks when n does not divide d
BLOCK = 0xB10C0000  # blockwise.block_streams: block b >= 1 draws from rng.split(BLOCK + b)
FOSGD_SIGNS = 0x5157  # fosgd and systems/hooks/fosgd: the signs of the randomised Hadamard
FOSGD_DITHER = 0xD17E  # fosgd and systems/hooks/fosgd: the dither of the one-bit quantiser
MONTECARLO = 0x3C  # montecarlo.draws_of: the rows of independent Monte Carlo compressions
DEMO_INPUT = 0xDA7A  # compressors/__main__: the normal vector whose compressed bits are measured

# ------------------------------------------------------------------ problems
X0 = 0x7830  # base: the random starting point (``x0=randn``)
TORCH_INIT = 0x1417  # torch_model: the initial weights, one stream per parameter tensor
SERVER_DATA = 0x5E5D  # glm (server's held-out rows) and quadratic (its shift): CAFe-S's server
HOLDOUT = 0x40D0  # images: the held-out test rows
IMAGES_SYNTHETIC = 0x1A6E  # images: the synthetic image set
TABULAR_SYNTHETIC = 0x5D17  # data: the synthetic sparse classification set
QUADRATIC_RANDOM = 0x9A0D  # quadratic_random: the quadratics' matrices, optimum and shifts
SPLIT_IID = 0x5011  # splits: the permutation of an iid split
SPLIT_DIRICHLET = 0xD112  # splits: the Dirichlet split's shuffles and class proportions

# ------------------------------------------------------------------ algorithms
BATCH = 0xBA7C  # dcgd, diana, vr_marina, dasha_*, ef21_page, comp_ams, d_sgd, choco_sgd
COIN = 0xC014  # marina, vr_marina, pp_marina, dasha_page, dasha_sync_mvr, ef21_page: the sync coin
MEGA = 0x3E6A  # dasha_sync_mvr: the mega-batch of a synchronisation round
PP_NODES = 0x5A3F  # pp_marina: the server's draw of the participating nodes
ADIANA_AT_X = 0xAD1A  # adiana (ADIANA, CANITA): the compressed message at x
ADIANA_AT_W = 0xAD1B  # adiana (ADIANA, CANITA): the compressed message at the anchor w
ADIANA_ANCHOR = 0xAD1C  # adiana (ADIANA, CANITA): the shared coin that refreshes the anchor
ADACGD_LEVEL = 0xADA0  # adacgd: coarse level j draws from ADACGD_LEVEL + j (the finest: DEFAULT)
THREE_PC_SECOND = 1  # three_pc_mechanisms: the second compressor C2 (3PCv2, 3PCv3, 3PCv4)
THREE_PC_COIN = 0x3C5  # three_pc_mechanisms: 3PCv5's shared coin
NEWTON_3PC_CBAG = 0x3CBA  # newton_3pc: each node's Bernoulli aggregation coin
NEWTON_3PC_HESS = 0x3CB1  # newton_3pc: the nodes' draws of the Hessian compressor
FEDNL_HESS = 0xFED1  # fednl: the nodes' draws of the Hessian compressor
SMOOTHNESS_SAMPLE = 0xD1A9  # smoothness_aware (dcgd_plus, diana_plus): the coordinate draws
EF14_BATCH = 0xEF14  # ef14: the nodes' minibatches
EF21_SGD_BATCH = 0xE5D1  # ef21_sgd: the nodes' minibatches
EF21_PLUS_FRESH = 0xF2E5  # ef21_plus: the fresh candidate's compressor draws
EF21_PP_PARTICIPATE = 0x9A27  # ef21_pp: the participation coins or shared permutation
EF21_BC_DOWN = 0xD0C1  # ef21_bc: the server's downlink compressor draws
EC_SGD_BATCH = 0xEC5D  # ec_sgd: the nodes' minibatches
EC_LSVRG_BATCH = 0xEC1B  # ec_lsvrg: the nodes' minibatches
EC_LSVRG_COIN = 0xEC1C  # ec_lsvrg: each node's coin that refreshes its reference point
GMC_BATCH = 0x6C3B  # gmc: the nodes' minibatches
LIEC_BATCH = 0x11EC  # liec_sgd: the nodes' minibatches
LIEC_DOWN = 0x11ED  # liec_sgd: the server's downlink compressor draws
NEOLITHIC_BATCH = 0x7D0B  # neolithic: the R accumulated minibatches
NEOLITHIC_MSC = 0x7E000000  # neolithic: stage r of the nodes' multi-step compression, + r
NEOLITHIC_DOWN = 0x7F000000  # neolithic: stage r of the server's multi-step compression, + r
DORE_DOWN = 0xD03E  # bidirectional_common (DORE): the server's downlink compressor draws
ARTEMIS_DOWN = 0xA27E  # bidirectional_common (Artemis): the server's downlink compressor draws
MCM_DOWN = 0x3C30  # bidirectional_common (MCM): the server's downlink compressor draws
MCM_DOWN_I = 0x3C31  # bidirectional_common (RandMCM): one independent downlink draw per node
BIDIR_PART = 0xB1D0  # bidirectional_common (Artemis, MCM): the partial-participation coins
SCAFFNEW_MASK = 0x5CAF  # compressed_scaffnew: the shared column permutation of the mask
SCAFFNEW_COIN = 0x5CA0  # compressed_scaffnew: the shared communication coin
BYZ_BUCKET = 0xB2C7  # robust/options: the server's bucketing permutation (Byzantine methods)
BYZ_VR_MARINA_COIN = 0xB1C0  # byz_vr_marina: the shared synchronisation coin
BYZ_VR_MARINA_BATCH = 0xB1BA  # byz_vr_marina: the nodes' minibatches
BYZ_DASHA_PAGE_COIN = 0xB1DC  # byz_dasha_page: the shared synchronisation coin
BYZ_DASHA_PAGE_BATCH = 0xB1DB  # byz_dasha_page: the nodes' minibatches
ROSDHB_BATCH = 0xB1DE  # rosdhb: the nodes' minibatches
SKETCH_BUCKET = 0x5CB0  # count_sketch: the shared hash buckets
SKETCH_SIGN = 0x5C51  # count_sketch: the shared hash signs
GOSSIP_X = 0x60C1  # tracking (BEER, MoTEF): the compressor's draws for the iterates' copies
GOSSIP_V = 0x60C2  # tracking (BEER, MoTEF): the compressor's draws for the trackers' copies
COLD_INNOVATION = 0x60C3  # cold (COLD, Dyna-COLD): the compressor's draws for the innovations
TRACK_BATCH = 0x7BA7  # tracking (gradient tracking, BEER, MoTEF): the nodes' minibatches

EF21_SGDM_BATCH = 0xC101  # ef21_sgdm (EF21-SGDM, EF21-SGD2M): the nodes' minibatches
ECONTROL_BATCH = 0xC102  # econtrol: the nodes' minibatches
SIGN_MV_BATCH = 0xC200  # majority_vote (signSGD-MV, Signum-MV): the nodes' minibatches
ONEBIT_BATCH = 0xC201  # onebit_adam (1-bit Adam, 0/1 Adam): the nodes' minibatches
ONEBIT_DOWN = 0xC202  # onebit_adam (1-bit Adam, 0/1 Adam): the server's compressor draws
TAMUNA_COHORT = 0xC801  # tamuna: the shared draw of each round's participating clients
LOCODL_COIN = 0xC810  # locodl: the shared communication coin
LOCODL_COMPRESS = 0xC811  # locodl: the compressor's draws for the differences x_i - y

FETCHSGD_SKETCH = 0xC400  # fetchsgd: the count sketch's shared hashes (fixed over rounds)
FETCHSGD_BATCH = 0xC401  # fetchsgd: the nodes' minibatches
SKETCHED_AMS_SKETCH = 0xC402  # sketched_amsgrad: the count sketch's shared hashes
SKETCHED_AMS_BATCH = 0xC403  # sketched_amsgrad: the nodes' minibatches
SKETCHING_CHECK_DATA = 0xC410  # theory check sketching: the sparse-target quadratic's data

EF21P_DOWN = 0xC300  # ef21_p (EF21-P + DIANA / DCGD): the server's downlink compressor draws
MARINA_P_DOWN = 0xC301  # marina_p (MARINA-P, M3): the server's per-worker downlink draws
MARINA_P_COIN = 0xC302  # marina_p (MARINA-P, M3): the coin of an uncompressed model broadcast
M3_COIN = 0xC303  # marina_p (M3): the coin of an uncompressed gradient round (uplink)

POWERSGD_PLUS_Q0 = 0xC701  # powersgd_plus: the shared initial query Q (no refresh at step 0)
POWERSGD_PLUS_BATCH = 0xC702  # powersgd_plus: the nodes' minibatches
LASER_P0 = 0xC703  # laser: the shared initial left factor P
LASER_NOISE = 0xC704  # laser: the channel's additive Gaussian noise (a server stream)
LASER_BATCH = 0xC705  # laser: the nodes' minibatches

THC_SIGNS = 0xC500  # thc: the shared signs of the randomised Hadamard transform
THC_DITHER = 0xC501  # thc: each node's stochastic rounding to the table
SPHERICAL_CODEBOOK = 0xC502  # spherical: the shared random codebook of unit vectors
COMPRESSION_BOUNDS = 0xC503  # theory_checks/compression_bounds: the compressors' draws

TWO_DIRECTION_AT_Y = 0xC900  # two_direction (2Direction): the nodes' compressed message at y
TWO_DIRECTION_AT_Z = 0xC901  # two_direction (2Direction): the nodes' compressed message at z
TWO_DIRECTION_DOWN = 0xC902  # two_direction (2Direction): the server's downlink compressor draws
TWO_DIRECTION_COIN = 0xC903  # two_direction (2Direction): the coin that refreshes z and k

QUADRATIC_GAME_DATA = 0xCA00  # quadratic_game: the game's matrices, z* and shifts
MASHA_COIN = 0xCA01  # vi/masha1: the shared coin that refreshes the reference point w
VI_CHECK_DRAWS = 0xCA02  # theory check vi: the broken variants' compressor draws

BYTEPS_ADAM_BATCH = 0xCB00  # adaptive_bidirectional (byteps-adam): the nodes' minibatches
BYTEPS_ADAM_DOWN = 0xCB01  # adaptive_bidirectional (byteps-adam): the server's compressor draws
BYTEPS_ADAM_CHECK_DATA = 0xCB02  # theory check adaptive_bidirectional: the instance's data

# ------------------------------------------------------------------ theory checks
MATRIX_SMOOTHNESS = 0x5A17  # matrix_smoothness: the scaled least-squares instance

#: Families ``base + i``, ``0 <= i < span``: no other tag falls in a family's range.
SPANS: dict[str, int] = {
    "DDP_LAYER": 1 << 40,
    "BLOCK": 1 << 24,
    "ADACGD_LEVEL": 1 << 8,
    "NEOLITHIC_MSC": 1 << 24,
    "NEOLITHIC_DOWN": 1 << 24,
}

#: Every tag of this module, by name.
ALL: dict[str, int] = {
    k: v for k, v in globals().items() if k.isupper() and type(v) is int and not k.startswith("_")
}
