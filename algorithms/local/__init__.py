"""Local training with compression: CompressedScaffnew."""
