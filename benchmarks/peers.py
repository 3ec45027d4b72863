"""Where python-etcd3 can run.

python-etcd3 0.12.0 (2020) ships protobuf code generated for protobuf 3; protobuf >= 4
refuses it unless the whole process uses the pure-Python implementation. So its workers
always run with ``PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python``: in this interpreter if
it imports that way next to the installed protobuf, otherwise in a throwaway venv with
``protobuf<4`` built under the run's work directory (not in ``--tiny`` runs).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from .procs import ROOT, Interpreter

PURE = {"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION": "python"}
PROBE = (
    "import etcd3, google.protobuf as p, importlib.metadata as m; from google.protobuf.internal"
    " import api_implementation as a; print(etcd3.__version__, p.__version__, a.Type(),"
    " m.version('tenacity'))"
)
#: What the throwaway venv gets (tenacity<7: see WAIT_BROKEN).
VENV_PACKAGES = ("etcd3==0.12.0", "protobuf<4", "grpcio", "tenacity<7")
WAIT_BROKEN = (
    "python-etcd3 0.12's Lock.acquire cannot wait with tenacity {} (its wait callback has "
    "tenacity's pre-7 signature: TypeError); pip install 'tenacity<7'"
)


def _describe(detail: str) -> tuple[str, str, str, str | None]:
    """(etcd3 version, protobuf version, implementation, why waiting fails or None)."""
    version, pb_version, impl, tenacity = detail.split()
    broken = int(tenacity.split(".")[0]) >= 7
    return version, pb_version, impl, WAIT_BROKEN.format(tenacity) if broken else None


def _probe(python: str) -> tuple[bool, str]:
    env = {**PURE, "PATH": "/usr/bin:/bin"}
    try:
        done = subprocess.run(
            [python, "-c", PROBE], capture_output=True, text=True, env=env, timeout=120, cwd=ROOT
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return False, str(exc)
    if done.returncode == 0:
        return True, done.stdout.strip()
    return False, (done.stderr.strip().splitlines() or ["?"])[-1]


def etcd3_interpreter(
    work_dir: Path, *, allow_venv: bool, force_venv: bool = False
) -> tuple[Interpreter | None, str, str | None]:
    """(interpreter for the python-etcd3 workers or None, what was done or why not,
    why its Lock cannot wait (None: it can))."""
    if not force_venv:
        ok, detail = _probe(sys.executable)
        if ok:
            version, pb_version, impl, wait_broken = _describe(detail)
            return (
                Interpreter(sys.executable, dict(PURE)),
                (
                    f"python-etcd3 {version} ran in worker processes of this interpreter with "
                    f"PROTOCOL_BUFFERS_PYTHON_IMPLEMENTATION=python (protobuf {pb_version}, "
                    f"{impl} implementation): its messages are parsed in pure Python"
                ),
                wait_broken,
            )
        if "No module named 'etcd3'" in detail:
            return None, "python-etcd3 is not installed (pip install -e '.[bench]')", None
        if not allow_venv:
            return (
                None,
                (
                    f"python-etcd3 does not import here even with pure-Python protobuf ({detail}); "
                    "the throwaway venv with protobuf<4 is not built in --tiny runs"
                ),
                None,
            )
    venv = work_dir / "etcd3-venv"
    python = str(venv / "bin" / "python")
    try:
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
        pip = [python, "-m", "pip", "install", "-q", "--disable-pip-version-check"]
        subprocess.run([*pip, *VENV_PACKAGES], check=True, timeout=600)
    except (OSError, subprocess.SubprocessError) as exc:
        why = f"python-etcd3: building a throwaway venv with protobuf<4 failed: {exc}"
        return None, why, None
    ok, detail = _probe(python)
    if not ok:
        why = f"python-etcd3 does not import even in a venv with protobuf<4: {detail}"
        return None, why, None
    version, pb_version, impl, wait_broken = _describe(detail)
    return (
        Interpreter(python, dict(PURE)),
        (
            f"python-etcd3 {version} ran in a throwaway venv built by this run ({venv}) with "
            f"protobuf {pb_version} ({impl} implementation), "
            + (
                "as asked (--etcd3-venv)"
                if force_venv
                else "because it does not import next to this interpreter's protobuf"
            )
        ),
        wait_broken,
    )
