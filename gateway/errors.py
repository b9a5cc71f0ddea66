"""Errors of the gateway package.

GatewayError
├── StartupError     the gateway cannot start as configured (names the setting)
└── ControlError     the control socket could not be reached or refused a request
    └── GatewayGoneError   the running gateway ended the connection (it stopped)
"""

from __future__ import annotations


class GatewayError(Exception):
    """Root of the gateway's errors."""


class StartupError(GatewayError):
    """The gateway cannot start as configured; the message names the setting to change."""


class ControlError(GatewayError):
    """The control socket could not be reached or answered with an error."""


class GatewayGoneError(ControlError):
    """The gateway a command was attached to ended the control connection: it stopped."""

    def __init__(self) -> None:
        super().__init__("the gateway went away (it closed the control connection)")
