"""Variance reduction: MARINA, VR-MARINA, PP-MARINA, DASHA and its PAGE/MVR/SYNC-MVR variants."""
