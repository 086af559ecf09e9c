"""SIGKILL of a command started in a session of its own, for the fault-injection tests
(tests/test_fault_injection.py, tests/test_empirical_reproduce.py): kill its leader, then check
that no process of its group outlives it."""
import os
import signal
import subprocess
import time

GROUP_EXIT_SECONDS = 10
"""How long the group's other processes (a prefetch worker) may take to follow their leader."""


def group_alive(group: int) -> bool:
    """Whether a process of the process group ``group`` exists."""
    try:
        os.killpg(group, 0)
    except ProcessLookupError:
        return False
    return True


def kill_and_check_no_orphan(process: subprocess.Popen, where: str) -> None:
    """SIGKILL ``process`` (the leader of its own session, ``start_new_session=True``; not its group)
    and assert that every process of its group is gone within :data:`GROUP_EXIT_SECONDS`; ``where``
    names the kill point in the failure."""
    process.send_signal(signal.SIGKILL)
    process.wait()
    process.stderr.close()
    deadline = time.monotonic() + GROUP_EXIT_SECONDS
    while group_alive(process.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not group_alive(process.pid), f"a process of the run killed {where} outlived it (an orphan)"
