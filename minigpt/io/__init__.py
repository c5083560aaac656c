"""Files, safely: atomic writes (atomic), the one lock between processes (lock), and reading a text
file a user named (textfiles). Standard library (and filelock) only."""
