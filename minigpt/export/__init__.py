"""Exporting a trained model for other tools: a Hugging Face `transformers` folder (`hf.py`: the
weights renamed onto GPT-NeoX, GPT-2 or OPT by `architectures.py`, the tokenizer of
`tokenizer_json.py`, the model card of `card.py`) and an ONNX file (`onnx_file.py`), written
through one staging folder (`folder.py`) so that a failed export leaves nothing behind.
The libraries they need (the `minigpt[export]` extra) are imported only when an export runs."""
