"""Whisper: the CTranslate2 runner, the torch runner with its model, weights and decoding,
and its stand-in on the simulated device (`sim_runner.py`).

All three keep the contract in `interface.py`; the engine imports only the one it runs.
"""
