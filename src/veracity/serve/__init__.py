"""``veracity serve``: an OpenAI-compatible gateway that scores live traffic with gamma.

Needs the ``serve`` extra (Starlette, uvicorn, prometheus_client)::

    from veracity.serve import GatewaySettings, create_app
    app = create_app(GatewaySettings(upstream="http://127.0.0.1:8080/v1", api_keys=("k",)))

The app is imported on first use, so reading a traffic log needs no web framework.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from veracity.serve.settings import GatewaySettings
from veracity.serve.verdicts import FixedThresholds, Thresholds, ThresholdSource

if TYPE_CHECKING:
    from veracity.serve.app import create_app

__all__ = ["FixedThresholds", "GatewaySettings", "ThresholdSource", "Thresholds", "create_app"]


def __getattr__(name: str) -> Any:
    if name == "create_app":
        from veracity.serve.app import create_app

        return create_app
    raise AttributeError(f"module 'veracity.serve' has no attribute {name!r}")
