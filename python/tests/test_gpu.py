"""evpool on a CUDA device: real streams, await done, errors, and PyTorch's and CuPy's streams.
Skipped without a device (conftest.py); the interop tests skip where the library is missing."""

import asyncio
import concurrent.futures

import pytest

import evpool

pytestmark = pytest.mark.gpu


def test_leases_are_exclusive_real_streams():
    with evpool.stream(0) as a, evpool.stream(0) as b:
        assert a.handle != b.handle and a.handle != 0
        assert a.device == 0
    assert evpool.stats()["streams"]["total"]["outstanding"] >= 0


def test_an_event_records_and_completes():
    with evpool.stream(0) as s, evpool.event(0) as e:
        e.record(s)
        e.synchronize()
        assert e.query()


async def test_await_done_on_an_idle_stream():
    with evpool.stream(0) as s:
        assert await evpool.done(s) is None


def test_future_and_notify_on_a_real_stream():
    called = concurrent.futures.Future()
    with evpool.stream(0) as s:
        evpool.notify(s, called.set_result)
        assert evpool.future(s).result(timeout=60) is None
    assert called.result(timeout=60) is None


def test_wait_between_two_leased_streams():
    with evpool.stream(0) as consumer, evpool.stream(0) as producer:
        evpool.wait(consumer, producer)
        evpool.future(consumer).result(timeout=60)


def test_a_device_outside_the_machine_is_a_value_error():
    with pytest.raises(ValueError, match="device ordinal"):
        evpool.stream(evpool.device_count())


async def test_many_tasks_await_their_streams():
    async def one():
        with evpool.stream(0) as s:
            await evpool.done(s)

    await asyncio.gather(*(one() for _ in range(256)))


def test_torch_work_on_a_leased_stream_is_awaited():
    torch = pytest.importorskip("torch")

    async def run():
        with evpool.stream(0) as s:
            with torch.cuda.stream(torch.cuda.ExternalStream(s.handle, device=torch.device("cuda", 0))):
                x = torch.ones(1 << 20, device="cuda")
                y = (x * 2).sum()
            await evpool.done(s)
            return y.item()

    assert asyncio.run(run()) == 2 * (1 << 20)


def test_a_torch_stream_is_taken_by_protocol_or_handle():
    torch = pytest.importorskip("torch")
    stream = torch.cuda.Stream(device=0)
    assert evpool.stream_handle(stream.cuda_stream) == stream.cuda_stream
    if hasattr(stream, "__cuda_stream__"):
        assert evpool.stream_handle(stream) == stream.cuda_stream
    evpool.future(stream.cuda_stream).result(timeout=60)


def test_cupy_work_on_a_leased_stream_is_awaited():
    cupy = pytest.importorskip("cupy")

    async def run():
        with evpool.stream(0) as s:
            with cupy.cuda.ExternalStream(s.handle, 0):
                y = (cupy.ones(1 << 20) * 3).sum()
            await evpool.done(s)
            return float(y.get())

    assert asyncio.run(run()) == 3 * (1 << 20)


def test_a_cupy_stream_is_taken_by_protocol_or_handle():
    cupy = pytest.importorskip("cupy")
    stream = cupy.cuda.Stream(non_blocking=True)
    assert evpool.stream_handle(stream.ptr) == stream.ptr
    if hasattr(stream, "__cuda_stream__"):
        assert evpool.stream_handle(stream) == stream.ptr
    evpool.future(stream.ptr).result(timeout=60)


def test_an_error_on_the_stream_raises_cuda_error_in_a_child_process():
    """A device fault is sticky for the whole context: provoked in a child, never here."""
    cupy = pytest.importorskip("cupy")
    import multiprocessing

    context = multiprocessing.get_context("spawn")
    with context.Pool(1) as pool:
        status, name = pool.apply(_fault_and_await, ())
    assert status != 0 and name.startswith("cudaError")
    del cupy


def _fault_and_await():
    import cupy

    import evpool as child_evpool

    kernel = cupy.RawKernel(r'extern "C" __global__ void fault(int *p) { *(volatile int *)0 = 1; }', "fault")

    async def run():
        with child_evpool.stream(0) as s:
            with cupy.cuda.ExternalStream(s.handle, 0):
                kernel((1,), (1,), (cupy.zeros(1, dtype=cupy.int32),))
            try:
                await child_evpool.done(s)
            except child_evpool.CUDAError as error:
                return error.status, error.name
            return 0, ""

    return asyncio.run(run())
