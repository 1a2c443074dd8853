"""The serving layer: the use cases every channel calls, with no HTTP in them.

- `state`: what a running server holds (engines, admission, pools, metrics) and how it
  starts and stops (`running_state`);
- `speech`: open a speech stream, a handle that owns its life cycle;
- `transcription`: open a transcription, the same way;
- `catalog`: the models and voices served, health and metrics snapshots;
- `failures`: the one mapping of an engine's stream failure to a `VoxError`;
- `jobs`: the messages a Ray front end sends its replicas.

The HTTP handlers (`voxserve.api`), the WebSocket handler and the Ray replicas
(`voxserve.ray`) call these. This package imports the engines, never `voxserve.api`,
Starlette or Ray: routing, parsing, status codes, headers and framing stay in `api`.
"""
