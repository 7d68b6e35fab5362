"""Absolute compressors with error compensation: EC-SGD, EC-LSVRG."""
