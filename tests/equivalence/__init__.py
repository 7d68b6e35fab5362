"""The equivalence record: fixed runs of every registered method whose files a refactor must
leave unchanged (``python -m tests.equivalence --help``)."""
