"""Piper (VITS): the ONNX Runtime runner with the graph rewrites only it uses, the torch
runner with its model and weights converted from the same ONNX graph, and its stand-in on
the simulated device (`sim_runner.py`).
"""
