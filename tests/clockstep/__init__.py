"""A wall-clock step for one test process, by LD_PRELOAD (see ``clockstep.c``).

``build(directory)`` compiles the library with the machine's C compiler and returns a
``ClockStep``: its ``environment`` starts a process under it, ``step(seconds)`` moves
that process's wall clock (and SQLite's 'now' in it) by ``seconds``, at once, while its
monotonic and boot-time clocks go on untouched, as an NTP step or a VM's migration does.
"""

import os
import shutil
import subprocess
import sysconfig
from pathlib import Path

SOURCE = Path(__file__).with_name("clockstep.c")


def compiler():
    """Return the C compiler to build with, or None."""
    named = (sysconfig.get_config_var("CC") or "cc").split()[0]
    return shutil.which(named) or shutil.which("cc") or shutil.which("gcc")


class ClockStep:
    def __init__(self, library, step_file):
        self.library = library
        self.step_file = step_file
        self.step(0)

    @property
    def environment(self):
        return {"LD_PRELOAD": str(self.library), "ATP_TEST_CLOCK_STEP_FILE": str(self.step_file)}

    def step(self, seconds):
        """Set the process's wall clock ``seconds`` away from the real one (seen within 50 ms)."""
        temporary = self.step_file.with_suffix(".new")
        temporary.write_text(f"{seconds}\n")
        os.replace(temporary, self.step_file)


def build(directory):
    """Compile the library into ``directory``; return a ``ClockStep``. Raise
    ``FileNotFoundError`` without a C compiler."""
    cc = compiler()
    if cc is None:
        raise FileNotFoundError("no C compiler (cc) to build tests/clockstep/clockstep.c")
    library = Path(directory) / "clockstep.so"
    subprocess.run([cc, "-shared", "-fPIC", "-O2", "-o", str(library), str(SOURCE), "-ldl"],
                   check=True, capture_output=True)
    return ClockStep(library, Path(directory) / "clock-step")
