"""Run an ASGI app under a real uvicorn on 127.0.0.1 (port 0) in a thread, for the tests.

A gateway app (``create_app``) runs under the server configuration ``veracity serve`` uses:
its header deadline and connection cap included."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import uvicorn


class RunningApp:
    """``with RunningApp(app) as running: running.url``; stops (with lifespan shutdown) on exit."""

    def __init__(self, app: Any) -> None:
        self.app = app

    def __enter__(self) -> RunningApp:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        gateway = getattr(getattr(self.app, "state", None), "gateway", None)
        if gateway is not None:
            from veracity.serve.server import server_config

            config = server_config(self.app, gateway.settings, log_level="warning")
        else:
            config = uvicorn.Config(self.app, lifespan="on", log_level="warning", access_log=False)
        self.server = uvicorn.Server(config)
        self.thread = threading.Thread(target=self.server.run, kwargs={"sockets": [sock]}, daemon=True)
        self.thread.start()
        for _ in range(400):  # up to 20 s for the lifespan startup
            if self.server.started or not self.thread.is_alive():
                break
            time.sleep(0.05)
        if not self.server.started:
            raise RuntimeError("the gateway did not start")
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self.thread.join(30)
