"""voxserve on a Ray cluster: `voxserve serve --ray [ADDRESS]`.

Ray Serve runs three deployments in one application: `Frontend`, the HTTP app from
`voxserve.api.app.create_app` (validation, errors, auth, access log, metrics) as the
ingress; `TTS` replicas, each running the single-machine TTS engine with its own deadline
scheduler, admission and credits; and `ASR` replicas with the single-machine ASR engine.
`router` sends each new stream to the TTS replica with the most headroom.

A local instance (no cluster address) is prepared by `environment` before Ray is
imported: every Ray listener on loopback (`loopback` rebinds the one Serve hard-codes),
token authentication, a private runtime directory, and HAProxy started through
`haproxy_guard` so that only voxserve's HTTP port listens on `--host`.

Only `voxserve serve --ray` imports this package, so `ray` stays an optional dependency
(`pip install -e .[ray]`). See docs/SCALING.md.
"""
