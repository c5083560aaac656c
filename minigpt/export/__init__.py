"""Exporting a trained model: a Hugging Face folder or an ONNX file (`formats.py`), written through one
staging folder (`folder.py`); the `minigpt[export]` libraries are imported only when one runs."""
