"""The serving layer: the use cases every channel calls, with no HTTP in them.

- `state`: what a running server holds (engines, admission, pools, metrics) and how it
  starts and stops (`running_state`);
- `speech`: open a speech stream, a handle that owns its life cycle;
- `transcription`: open a transcription, the same way;
- `catalog`: the models and voices served, health and metrics snapshots;
- `service`: `Service`, what the one set of HTTP handlers calls, whoever runs the
  engines: `AppState` here, `remote.RemoteState` on Ray replicas;
- `remote`: the same use cases handed to Ray replicas through backends;
- `jobs`: the messages a Ray front end sends its replicas, and their replies;
- `failures`: the one mapping of an engine's stream failure to a `VoxError`;
- `waiting`: `unless_gone`, a wait that ends when the client leaves;
- `metrics`: the Prometheus registry every channel records in;
- `offline`: one speech stream, one transcription or the voice list in this process,
  for the CLI's offline commands.

The HTTP handlers (`voxserve.api`), the WebSocket handler, the Ray replicas
(`voxserve.ray`) and the CLI's offline commands call these. This package imports the engines, never `voxserve.api`,
Starlette or Ray: routing, parsing, status codes, headers and framing stay in `api`.
"""
