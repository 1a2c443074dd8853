"""Moonshine base-en speech recognition on ONNX Runtime: the runner (`onnx_runner.py`), the
rewrite that makes its shipped graphs fast and its decoder batchable (`graphs.py`), and its
vocabulary (`tokenizer.py`).
"""
