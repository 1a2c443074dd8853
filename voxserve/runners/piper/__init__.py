"""Piper (VITS): the ONNX Runtime runner with the graph rewrites only it uses, and the torch
runner with its model and weights converted from the same ONNX graph.
"""
