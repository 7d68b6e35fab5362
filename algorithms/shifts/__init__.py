"""Unbiased compression with learned shifts: DCGD, DIANA, ADIANA, CANITA, DCGD+/DIANA+ (matrix
smoothness), CAFe and CAFe-S."""
