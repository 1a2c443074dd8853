"""Speaker embedding: CAM++ rebuilt for ONNX Runtime from its published state dict."""
