"""Methods for distributed variational inequalities (VIs) and saddle-point problems with compressed
communication: MASHA1 and MASHASim (compression with data similarity). They declare
``solves_vi = True``; the problems that are VIs
(``quadratic-game``) refuse every other method."""
