"""Start a system's worker processes, and stop them and every process they started."""

import os
import signal
import subprocess
import time

from bench.peers import base

STOP_TIMEOUT_SECONDS = 30


class Workers:
    """The worker processes of one measurement: ``runner.worker_commands(count)``, each in
    a session of its own so that what it forks can be stopped with it."""

    def __init__(self, runner, count, records_directory, log_path):
        self.runner = runner
        self.log = open(log_path, "a")  # closed by stop()
        self.processes = []
        for argv, environment in runner.worker_commands(count):
            env = {**os.environ, **environment, "ATP_PEERS_RECORDS": str(records_directory)}
            self.processes.append(subprocess.Popen(
                argv, cwd=base.PROJECT_ROOT, env=env, stdout=self.log,
                stderr=subprocess.STDOUT, start_new_session=True))

    def check(self):
        """Raise RuntimeError when a worker process has exited."""
        for process in self.processes:
            if process.poll() is not None:
                raise RuntimeError(f"a worker exited with status {process.returncode}: "
                                   f"see {self.log.name}")

    def stop(self):
        """Stop the workers with the system's stop signal; kill what is left."""
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(self.runner.stop_signal)
        deadline = time.monotonic() + STOP_TIMEOUT_SECONDS
        for process in self.processes:
            try:
                process.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                pass
        for process in self.processes:
            # Its session: the worker and whatever it forked (a pool's children).
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            process.wait()
        self.log.close()
