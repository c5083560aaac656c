"""scripts/fuzz.py's parts: the property (harness.py) and the inputs (readers.py)."""
