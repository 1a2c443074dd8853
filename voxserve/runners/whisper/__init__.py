"""Whisper: the CTranslate2 runner, and the torch runner with its model, weights and decoding.

Both keep the contract in `interface.py`; the engine imports only the one it runs.
"""
