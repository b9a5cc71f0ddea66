"""Configuration: pydantic models of the whole gateway, loaded from TOML and the environment."""

from config.errors import ConfigError, ConfigFileError, Problem
from config.loading import load_config, validate
from config.models import AgentConfig, GatewayConfig, ProviderConfig

__all__ = [
    "AgentConfig",
    "ConfigError",
    "ConfigFileError",
    "GatewayConfig",
    "Problem",
    "ProviderConfig",
    "load_config",
    "validate",
]
