"""A queue's poller against the ends of things: another thread closing the queue, the interpreter
finalizing, fork(). Each scene runs in a child interpreter of its own, which a failure would
deadlock, abort or leave hanging: the test sees its exit status and output, within a deadline."""

import os
import subprocess
import sys
import textwrap

import pytest

PRELUDE = """
import faulthandler, os, sys, threading, time, warnings
warnings.simplefilter("ignore", DeprecationWarning)
from evpool import testing
api = testing.api
"""


def run_scene(scene, timeout=60):
    """(exit status, output) of `scene` run by a child interpreter with evpool's path."""
    child = subprocess.run([sys.executable, "-c", PRELUDE + textwrap.dedent(scene)], capture_output=True,
                           text=True, timeout=timeout, env=dict(os.environ, PYTHONFAULTHANDLER="1"))
    return child.returncode, child.stdout + child.stderr


def test_stats_while_another_thread_closes_the_queue_does_not_deadlock():
    # close() waits, without the GIL, for a callback that needs the GIL to return; stats() on this
    # thread, which holds the GIL, must not wait for close() meanwhile.
    status, output = run_scene("""
        q = api.CompletionQueue()
        s = api.stream(0)
        started = threading.Event()
        def callback(error):
            started.set()
            time.sleep(0.5)  # gives the GIL up, and needs it back to return
        q.notify(s, callback)
        testing.complete(s)
        started.wait()
        threading.Thread(target=q.close, daemon=True).start()
        time.sleep(0.1)  # close() is joining the poller now
        faulthandler.dump_traceback_later(20, exit=True)
        print("completions", q.stats()["completions"], flush=True)
    """)
    assert status == 0, output
    assert "completions 1" in output


def test_callbacks_in_flight_while_the_interpreter_finalizes_end_without_an_abort_or_a_hang():
    # The last garbage collection runs a __del__ that gives the GIL up: a poller waiting for the
    # GIL to deliver took it then, and was ended inside a noexcept function (abort), or, on a
    # free-threaded interpreter, parked for ever while the main thread joined it (hang).
    status, output = run_scene("""
        import gc
        q = api.CompletionQueue()
        s = api.stream(0)
        class GivesTheGilUp:
            def __del__(self):
                time.sleep(0.05)
        gc.disable()
        cycle = GivesTheGilUp(); cycle.itself = cycle; del cycle
        ran = [0]
        def callback(error):
            ran[0] += 1
            for _ in range(3000):
                pass
        for _ in range(20000):
            q.notify(s, callback)
        testing.complete(s)
        while ran[0] == 0:
            time.sleep(0.001)
    """)
    assert status == 0, output


def test_once_the_exit_hook_ran_a_completion_is_dropped_not_delivered():
    # What the atexit hook promises: from then on the poller takes no GIL, so nothing that
    # completes later reaches Python (its reference is leaked), and close() does not wait for it.
    status, output = run_scene("""
        q = api.CompletionQueue()
        s = api.stream(0)
        ran = []
        q._stop_taking_the_gil()  # what the hook does, before the interpreter finalizes
        q.notify(s, ran.append)
        testing.complete(s)
        deadline = time.monotonic() + 30
        while q.pending and time.monotonic() < deadline:
            time.sleep(0.001)
        q.close()
        print("pending", q.pending, "delivered", len(ran), flush=True)
    """)
    assert status == 0, output
    assert "pending 0 delivered 0" in output, output


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork()")
def test_a_fork_child_reads_the_stats_of_a_queue_that_a_parent_thread_was_closing():
    # close() holds the poller's mutex while it joins the poller; the child, which has no such
    # thread, must not wait for that mutex.
    status, output = run_scene("""
        q = api.CompletionQueue()
        s = api.stream(0)
        pending = q.future(s)  # close() waits for it
        threading.Thread(target=q.close).start()
        time.sleep(0.2)
        pid = os.fork()
        if pid == 0:
            faulthandler.dump_traceback_later(10, exit=True)
            try:
                print("child: pending", q.stats()["pending"], flush=True)
            except Exception as error:
                print("child: raised", type(error).__name__, error, flush=True)
            os._exit(0)
        _, wait_status = os.waitpid(pid, 0)
        print("child exit", os.waitstatus_to_exitcode(wait_status), flush=True)
        testing.complete(s)
        pending.result(30)
    """)
    assert status == 0, output
    assert "child exit 0" in output and "child: " in output, output
    assert "Timeout" not in output, output


@pytest.mark.parametrize("made_on", ["this thread", "a thread that has ended"])
def test_a_callback_holding_the_last_reference_to_its_queue_lets_it_go_off_the_poller(made_on):
    # The poller drops the callback, and with it the queue's last reference: the queue's
    # destructor, run there, would join the thread it runs on (an abort). A queue made on a thread
    # that has ended is, on a free-threaded interpreter, freed by whichever thread drops it last.
    status, output = run_scene(f"""
        import weakref
        done = threading.Event()
        s = api.stream(0)
        made = []
        def make():
            q = api.CompletionQueue()
            q.notify(s, lambda error, q=q: done.set())  # the callback holds its own queue
            made.append(weakref.ref(q))
        if {made_on!r} == "this thread":
            make()
        else:
            maker = threading.Thread(target=make)
            maker.start()
            maker.join()
        testing.complete(s)
        assert done.wait(30)
        deadline = time.monotonic() + 30
        while made[0]() is not None and time.monotonic() < deadline:
            time.sleep(0.001)
        print("queue freed:", made[0]() is None, flush=True)
    """)
    assert status == 0, output
    assert "queue freed: True" in output, output
