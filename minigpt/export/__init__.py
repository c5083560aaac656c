"""Exporting a trained model: a Hugging Face folder (`hf.py`) or an ONNX file (`onnx_file.py`), written
through one staging folder (`folder.py`); the `minigpt[export]` libraries are imported only when one runs."""
