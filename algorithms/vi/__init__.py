"""Methods for distributed variational inequalities (VIs) and saddle-point problems with compressed
communication: MASHA1. They declare ``solves_vi = True``; the problems that are VIs
(``quadratic-game``) refuse every other method."""
