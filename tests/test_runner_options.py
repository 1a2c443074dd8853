"""The TTS runners' ONNX Runtime session options."""

from __future__ import annotations

import pytest

from voxserve.runners.options import cpu_options


def test_only_sessions_on_several_threads_spin_and_they_park_after_each_call() -> None:
    one, two = cpu_options(1), cpu_options(2)
    assert one.intra_op_num_threads == 1 and two.intra_op_num_threads == 2
    assert one.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert two.get_session_config_entry("session.intra_op.allow_spinning") == "1"
    assert two.get_session_config_entry("session.force_spinning_stop") == "1"
    for opts in (one, two):
        assert opts.inter_op_num_threads == 1
        assert opts.get_session_config_entry("session.inter_op.allow_spinning") == "0"
    with pytest.raises(ValueError):
        cpu_options(0)
