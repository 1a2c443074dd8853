"""ONNX Runtime session options shared by the CPU runners (Piper, Kokoro, Moonshine, the noise
filter, the speaker embedder, the end-of-turn model).

Every session runs its graph's nodes in order (`ORT_SEQUENTIAL`, no inter-op pool). A
single-threaded session, the crowded case, has no pool at all. A session on several
intra-op threads runs only while the engine found every worker free (a lone stream), and
its pool threads spin between the graph's many small nodes instead of sleeping: with
`allow_spinning` off, every node waits for a thread to wake, which lengthens the lone
stream's call and so its first audio (the README, "How it works"). `force_spinning_stop`
parks them the moment the call returns: left spinning, they burn a core through every gap
between calls and slow the other sessions' calls.
"""

from __future__ import annotations

import onnxruntime as ort

__all__ = ["cpu_options"]


def cpu_options(threads: int) -> ort.SessionOptions:
    """Options for a CPU session on `threads` intra-op threads (graph optimization left
    at ONNX Runtime's default, all of it)."""
    if threads < 1:
        raise ValueError("a session needs at least one thread")
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    opts.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    opts.add_session_config_entry("session.inter_op.allow_spinning", "0")
    if threads > 1:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "1")
        opts.add_session_config_entry("session.force_spinning_stop", "1")
    else:
        opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    opts.log_severity_level = 3
    return opts
