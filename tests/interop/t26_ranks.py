"""Starts the gloo ranks of a torch 2.6 interop script by hand (used inside the chroot by t26_*.py).

launch(script, args, n) runs `python3 script *args` n times with MASTER_ADDR/MASTER_PORT/RANK/WORLD_SIZE and
SCK_T26_RANK=1 set (the script's main runs its rank code when it sees SCK_T26_RANK), each under a timeout:
a failed rank leaves its gloo peers waiting forever.  A rank's lines starting "rank " are printed, or all
of its output when it failed.  Returns 0 when every rank exited 0.
"""
import os
import socket
import subprocess
import sys

TIMEOUT_S = 240


def launch(script, args, n, timeout_s=TIMEOUT_S):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(n):
        env = dict(os.environ, MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(r), WORLD_SIZE=str(n),
                   SCK_T26_RANK="1", PYTHONWARNINGS="ignore")
        procs.append(subprocess.Popen([sys.executable, os.path.abspath(script)] + [str(a) for a in args], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
    rc = 0
    for r, p in enumerate(procs):
        try:
            out, _ = p.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            out, _ = p.communicate()
            print(f"rank {r}: timed out after {timeout_s}s")
            rc = 1
        text = out.decode("utf-8", "replace")
        lines = [ln for ln in text.splitlines() if ln.startswith("rank ") or "Error" in ln or "error" in ln]
        print("\n".join(lines) if p.returncode == 0 else text)
        rc = rc or p.returncode
    return rc
