"""Kokoro: the ONNX Runtime runner on the dequantized, split graph, the torch runner with
its model and weights converted from the same graph, and its stand-in on the simulated
device (`sim_runner.py`).
"""
