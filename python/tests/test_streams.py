"""Leases of streams and events, the stream protocol, wait(), stats(): over the host backends."""

import gc
import sys
import sysconfig
import threading
import time

import pytest

import evpool
from evpool import testing


def test_a_free_threaded_interpreter_gets_the_free_threaded_build_which_keeps_the_gil_off():
    free_threaded = bool(sysconfig.get_config_var("Py_GIL_DISABLED"))
    assert evpool.FREE_THREADED == free_threaded
    if free_threaded:
        from evpool import _testing  # noqa: F401  (each module declares that it runs without the GIL)

        assert not sys._is_gil_enabled(), "importing evpool turned the GIL back on"


def test_a_lease_is_a_stream_while_its_with_block_runs(api):
    with api.stream(0) as s:
        assert s.active and s.device == 0
        assert s.__cuda_stream__() == (0, s.handle)
        assert api.native.stream_handle(s) == s.handle
    assert not s.active


def test_a_lease_used_after_its_with_block_raises(api):
    with api.stream(1) as s:
        pass
    for use in (lambda: s.handle, lambda: s.device, s.__cuda_stream__, lambda: api.future(s)):
        with pytest.raises(RuntimeError, match="after it ended"):
            use()
    s.end()  # a second end is harmless


def test_the_pool_hands_out_each_stream_to_one_holder_at_a_time(api):
    with api.stream(0) as first, api.stream(0) as second:
        assert first.handle != second.handle


def test_a_stream_handed_back_busy_is_not_handed_out_while_its_work_runs(api):
    pool = testing.StreamPool()
    with pool.lease(0) as s:
        busy = s.handle
        testing.make_busy(s, 1000)
    with pool.lease(0) as s:
        assert s.handle != busy


def test_synchronize_and_end_hands_the_stream_back_idle(api):
    pool = testing.StreamPool()
    with pool.lease(0) as s:
        handle = s.handle
        testing.make_busy(s, 3)
        s.synchronize_and_end()
        assert not s.active
    with pool.lease(0) as s:
        assert s.handle == handle


def test_a_device_outside_the_pool_is_a_value_error(api):
    for device in (testing.DEVICES, 99):
        with pytest.raises(ValueError, match=f"device ordinal {device}"):
            api.stream(device)
        with pytest.raises(ValueError, match=f"device ordinal {device}"):
            api.event(device)


def test_pools_of_ones_own_count_their_own_leases(api):
    pool = testing.StreamPool(max_per_device=4)
    for _ in range(3):
        with api.stream(1, pool=pool):
            pass
    total = pool.stats()["total"]
    assert (total["gets"], total["puts"], total["outstanding"]) == (3, 3, 0)
    assert not pool.process_wide and testing.StreamPool.instance().process_wide


def test_events_record_and_complete_with_their_streams_work(api):
    with api.stream(0) as s, api.event(0) as e:
        testing.complete(s)
        api.future(s)  # one piece of work on the stream
        e.record(s)
        assert not e.query()
        testing.complete(s)
        assert e.query()
        e.synchronize()
    with pytest.raises(RuntimeError, match="after it ended"):
        e.record(s)


def test_wait_takes_any_stream_object_or_an_int(api):
    class Foreign:  # a CuPy-, PyTorch- or cuda.core-like stream
        def __init__(self, handle):
            self.handle = handle

        def __cuda_stream__(self):
            return (0, self.handle)

    with api.stream(0) as consumer, api.stream(1) as producer:
        api.wait(consumer, producer)
        api.wait(Foreign(consumer.handle), producer.handle)
        assert testing.waits()[-2:] == [(consumer.handle, producer.handle)] * 2


@pytest.mark.parametrize(
    "stream, error, message",
    [
        (object(), TypeError, "expected a stream"),
        ("0x1", TypeError, "expected a stream"),
        (True, TypeError, "expected a stream"),
        (-1, ValueError, "must be an int in"),
        (2**64, ValueError, "must be an int in"),
        (12345, ValueError, "no host stream has the handle"),
    ],
)
def test_what_is_not_a_stream_is_refused(api, queue, stream, error, message):
    with api.stream(0) as s:
        with pytest.raises(error, match=message):
            api.wait(s, stream)
        with pytest.raises(error, match=message):
            queue.future(stream)


@pytest.mark.parametrize("answer", [(1, 5), (0, "5"), 5, (0,), None])
def test_a_wrong_answer_to_the_protocol_is_a_type_error(api, answer):
    class Odd:
        def __cuda_stream__(self):
            return answer

    with api.stream(0) as s:
        with pytest.raises(TypeError, match="__cuda_stream__"):
            api.wait(s, Odd())


def test_stats_reports_the_process_wide_pools_and_the_default_queue(api):
    with api.stream(0):
        stats = api.stats()
    assert stats["streams"]["total"]["outstanding"] >= 1
    assert {"requests", "completions", "pending", "poller_cpu_seconds"} <= stats["completions"].keys()


def test_a_lease_shared_by_threads_is_ended_once(api):
    pool = testing.StreamPool()
    lease = pool.lease(0)
    barrier = threading.Barrier(8)

    def end():
        barrier.wait()
        lease.end()

    threads = [threading.Thread(target=end) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    total = pool.stats()["total"]
    assert (total["gets"], total["puts"], total["outstanding"]) == (1, 1, 0)


def test_a_lease_ended_while_another_thread_synchronizes_on_it_goes_back_after_that_call(api, queue):
    # synchronize() waits without the GIL; end() on this thread meanwhile must not hand the event
    # back under it (it would be reused, or destroyed by a trim, while the other thread waits).
    pool = testing.EventPool()
    with api.stream(0) as s:
        pending = queue.future(s)  # one piece of work on s, not done
        for pause in (0.05, 0.2, 1.0):  # a longer one if end() came before synchronize() began
            lease = pool.lease(0)
            lease.record(s)
            outcome, started = [], threading.Event()

            def synchronize(lease=lease, outcome=outcome, started=started):
                started.set()
                try:
                    lease.synchronize()
                    outcome.append("returned")
                except RuntimeError:
                    outcome.append("refused")

            waiter = threading.Thread(target=synchronize)
            waiter.start()
            started.wait()
            time.sleep(pause)
            lease.end()
            waiter.join(timeout=0.2)
            if outcome != ["refused"]:
                break
        assert not lease.active
        assert outcome == [], f"synchronize() {outcome[0]} before the work was done"
        assert pool.stats()["total"]["outstanding"] == 1, "the event went back while synchronize() waited on it"
        testing.complete(s)
        waiter.join(timeout=30)
        assert outcome == ["returned"]
        pending.result(timeout=30)
    total = pool.stats()["total"]
    assert total["outstanding"] == 0 and total["gets"] == total["puts"]


def test_a_lease_may_outlive_its_pool(api):
    pool = testing.StreamPool()
    lease = pool.lease(0)
    del pool
    gc.collect()
    assert lease.active
    lease.end()


def test_the_cuda_module_refuses_without_a_device_with_cuda_error():
    if evpool.device_count() > 0:
        pytest.skip("a CUDA device is present")
    with pytest.raises(evpool.CUDAError) as raised:
        evpool.stream(0)
    assert raised.value.status != 0 and raised.value.name.startswith("cudaError")
    assert raised.value.name in str(raised.value)
