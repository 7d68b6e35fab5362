"""Error feedback: EF14, EF21 and its variants (SGD, PP, HB, PAGE, Plus), the 3PC framework, EF-BV,
AdaCGD."""
