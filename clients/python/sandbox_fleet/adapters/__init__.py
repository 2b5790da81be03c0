"""Environments of agent frameworks over a sandbox of a fleet, to hand an
agent in place of the framework's own Docker environment. Each is built
from the framework's public source (cited in its module) and imports
nothing of the framework unless it is installed."""

from .miniswe import MiniSweEnvironment
from .r2egym import R2EGymRuntime
from .swerex import SweRexDeployment, SweRexRuntime

__all__ = ["MiniSweEnvironment", "R2EGymRuntime", "SweRexDeployment", "SweRexRuntime"]
