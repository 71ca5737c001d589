"""A fake `nvidia-cuda-mps-control` executable: a real process with the real program's
interface, for testing the MPS adapter without a GPU.

`write_fake_mps_control(directory)` writes the script and returns its path. Behaviour:
- `-d`: starts a detached background daemon process that writes
  `$CUDA_MPS_PIPE_DIRECTORY/nvidia-cuda-mps-control.pid`, then returns 0 (refuses with exit 1
  if a daemon already runs for that pipe directory);
- no arguments: reads commands from stdin and talks to the daemon through files in the pipe
  directory: `quit` (daemon exits, pid file removed), `set_default_active_thread_percentage N`,
  `get_default_active_thread_percentage`, `get_server_list`; an unknown command or no running
  daemon prints an error to stderr and exits 1.
"""

from __future__ import annotations

import sys
from pathlib import Path

__all__ = ["write_fake_mps_control"]

_SCRIPT = r"""
import os, subprocess, sys, time
pipe = os.environ.get("CUDA_MPS_PIPE_DIRECTORY", "/tmp/nvidia-mps")
pidfile = os.path.join(pipe, "nvidia-cuda-mps-control.pid")
quitfile = os.path.join(pipe, "quit.request")
pctfile = os.path.join(pipe, "default_active_thread_percentage")

def alive():
    try:
        pid = int(open(pidfile).read())
        os.kill(pid, 0)
        return True
    except (OSError, ValueError):
        return False

def serve():
    os.makedirs(pipe, exist_ok=True)
    tmp = pidfile + ".tmp"
    with open(tmp, "w") as f:
        f.write(str(os.getpid()))
    os.replace(tmp, pidfile)
    while not os.path.exists(quitfile):
        time.sleep(0.01)
    os.remove(quitfile)
    os.remove(pidfile)

if sys.argv[1:] == ["--serve"]:
    serve()
    sys.exit(0)
if sys.argv[1:] == ["-d"]:
    if alive():
        print("An instance of this daemon is already running", file=sys.stderr)
        sys.exit(1)
    subprocess.Popen([sys.executable, __file__, "--serve"], start_new_session=True,
                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                     stderr=subprocess.DEVNULL)
    sys.exit(0)
if sys.argv[1:]:
    print("usage: nvidia-cuda-mps-control [-d | -f]", file=sys.stderr)
    sys.exit(2)
if not alive():
    print("Cannot find MPS control daemon process", file=sys.stderr)
    sys.exit(1)
for line in sys.stdin:
    words = line.split()
    if not words:
        continue
    if words == ["quit"]:
        open(quitfile, "w").close()
        for _ in range(500):
            if not os.path.exists(pidfile):
                break
            time.sleep(0.01)
    elif words[0] == "set_default_active_thread_percentage" and len(words) == 2:
        value = float(words[1])
        if not 0 < value <= 100:
            print("Invalid percentage", file=sys.stderr)
            sys.exit(1)
        open(pctfile, "w").write(words[1])
        print(words[1])
    elif words == ["get_default_active_thread_percentage"]:
        print(open(pctfile).read() if os.path.exists(pctfile) else "100.0")
    elif words == ["get_server_list"]:
        pass
    else:
        print("Unrecognized command: " + line.strip(), file=sys.stderr)
        sys.exit(1)
"""


def write_fake_mps_control(directory: Path) -> Path:
    """Write the fake program into `directory` (executable, using this interpreter)."""
    path = Path(directory) / "nvidia-cuda-mps-control"
    path.write_text(f"#!{sys.executable}\n{_SCRIPT}")
    path.chmod(0o755)
    return path
