"""Bidirectional compression: DORE, Artemis, MCM, EF21-BC."""
