"""A two-node Ray cluster on 127.0.0.1 (``ray start --head`` plus a worker node): the CLI's
γ run on its actors gives the records of the in-process executor."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from click.testing import CliRunner

from veracity.cli import main

pytest.importorskip("ray")

pytestmark = pytest.mark.slow  # starts Ray: several seconds even on an idle machine

RAY = Path(sys.executable).parent / "ray"
ARGS = ["gamma", "What is 2+2?", "Who wrote Hamlet?", "Capital of France?", "-n", "3",
        "--model", "fake/unstable", "--embedder", "hash/default", "--json", "--no-cache"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def test_gamma_on_a_head_and_a_worker_node_equals_in_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # a throw-away cluster on 127.0.0.1 only: no token to hand between its processes
    monkeypatch.setenv("RAY_AUTH_MODE", "disabled")
    local = CliRunner().invoke(main, ARGS)
    assert local.exit_code == 0, local.output
    port = free_port()
    address = f"127.0.0.1:{port}"
    common = ["--block", "--num-cpus=1", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
    head_log = (tmp_path / "head.log").open("w")
    nodes = [subprocess.Popen([str(RAY), "start", "--head", f"--port={port}", "--include-dashboard=false",
                               *common], stdout=head_log, stderr=subprocess.STDOUT)]
    try:
        for _ in range(60):
            assert nodes[0].poll() is None, (tmp_path / "head.log").read_text()
            up = subprocess.run([str(RAY), "status", f"--address={address}"], capture_output=True,
                                timeout=60)
            if up.returncode == 0:
                break
            time.sleep(1)
        assert up.returncode == 0, up.stderr
        nodes.append(subprocess.Popen([str(RAY), "start", f"--address={address}", *common],
                                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        # one CPU per node and one per actor: the two actors must land on the two nodes
        remote = subprocess.run(
            [sys.executable, "-m", "veracity", *ARGS, "--executor", "ray", "--ray-address", address,
             "--actors", "2", "--actor-cpus", "1", "--actor-batch", "2"],
            capture_output=True, text=True, timeout=180,
        )
        assert remote.returncode == 0, remote.stderr
        assert json.loads(remote.stdout) == json.loads(local.output)
    finally:
        for node in reversed(nodes):
            node.terminate()  # --block: the command stops the processes it started
            node.wait(60)
        head_log.close()
