"""minigpt: character-level GPT training from the command line."""

__version__ = "0.1.0"
