"""Momentum and adaptive steps with compression: COMP-AMS, GMC, LIEC-SGD."""
