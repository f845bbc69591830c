"""The accelerator interface from Python, as DeepSpeed's accelerator and torch.cuda expose it:
devices, memory statistics, streams, events and graphs, on the accelerator kiln picks here (the
CPU backend in CI)."""
import numpy as np
import pytest

import kiln


@pytest.fixture(scope="module")
def ctx():
    return kiln.context()


def test_devices_dtypes_and_capabilities(ctx):
    assert ctx.device_count() >= 1
    assert ctx.device_name(0)
    assert ctx.current_device() == 0
    assert "float32" in ctx.supported_dtypes()
    assert ctx.communication_backend_name() in ("gloo", "nccl", "rccl", "ccl")
    assert ctx.supports("graphs") == (ctx.unsupported_reason("graphs") == "")
    with pytest.raises(kiln.KilnError, match="no capability named 'teleport'"):
        ctx.supports("teleport")


def test_memory_stats_have_torch_cuda_names(ctx):
    stats = ctx.memory_stats()
    assert set(stats) == {"allocated_bytes", "max_allocated_bytes", "reserved_bytes", "max_reserved_bytes", "total_bytes",
                          "available_bytes"}
    assert stats["total_bytes"] >= stats["available_bytes"] > 0
    ctx.reset_peak_memory_stats()
    assert ctx.memory_stats()["max_allocated_bytes"] == ctx.memory_stats()["allocated_bytes"]


def test_a_launch_on_a_stream_of_its_own_ordered_by_events(ctx):
    n = 4096
    a, b, out = np.ones(n, np.float32), np.full(n, 2, np.float32), np.zeros(n, np.float32)
    add = ctx.op("vector_add")
    s = ctx.Stream()
    add(a, b, out, n, grid=kiln.cdiv(n, 256), block=256, stream=s, sync=False)
    done = ctx.Event()
    s.record_event(done)
    done.synchronize()
    assert done.query() and s.query()
    assert np.all(out == 3)


def test_a_captured_graph_replays_its_launches(ctx):
    if not ctx.supports("graphs"):
        pytest.skip("graphs: " + ctx.unsupported_reason("graphs"))
    n = 1000
    a, b, out = np.arange(n, dtype=np.float32), np.ones(n, np.float32), np.zeros(n, np.float32)
    add = ctx.op("vector_add").build()
    s = ctx.Stream()
    s.begin_capture()
    add(a, b, out, n, grid=kiln.cdiv(n, 256), block=256, stream=s, sync=False)
    graph = s.end_capture()
    assert np.all(out == 0)  # captured, not run
    graph.replay(s)
    s.synchronize()
    assert np.array_equal(out, a + 1)
    a += 10  # the same memory, new contents: a replay reads them
    graph.replay(s)
    s.synchronize()
    assert np.array_equal(out, a + 1)


def test_event_timing_where_the_accelerator_has_it(ctx):
    if not ctx.supports("event_timing"):
        pytest.skip("event timing: " + ctx.unsupported_reason("event_timing"))
    start, end, s = ctx.Event(), ctx.Event(), ctx.Stream()
    s.record_event(start)
    n = 1 << 20
    a = np.ones(n, np.float32)
    ctx.op("vector_add")(a, a, a, n, grid=kiln.cdiv(n, 256), block=256, stream=s, sync=False)
    s.record_event(end)
    end.synchronize()
    assert end.elapsed_time(start) >= 0.0
