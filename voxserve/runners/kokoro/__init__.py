"""Kokoro: the ONNX Runtime runner on the dequantized, split graph, and the torch runner with
its model and weights converted from the same graph.
"""
