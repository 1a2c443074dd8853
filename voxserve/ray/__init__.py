"""voxserve on a Ray cluster: `voxserve serve --ray [ADDRESS]`.

Ray Serve runs three deployments in one application: `Frontend`, the HTTP app from
`voxserve.api.app.create_app` (validation, errors, auth, access log, metrics) as the
ingress; `TTS` replicas, each running the single-machine TTS engine with its own deadline
scheduler, admission and credits; and `ASR` replicas with the single-machine ASR engine.
`router` sends each new stream to the TTS replica with the most headroom.

Only `voxserve serve --ray` imports this package, so `ray` stays an optional dependency
(`pip install -e .[ray]`). See docs/SCALING.md.
"""
