"""agent-sandbox-rl's ``testing``: FakeFleet (and AsyncFakeFleet), the
compatible SandboxFleet over sandbox_fleet.testing's in-process session,
for unit tests of training loops with no cluster. Its keywords beyond
the reference's (``image_roots``, ``isolate``) are the native fake's."""

from .fleet import AsyncFakeFleet, FakeFleet, SandboxHandle

# The reference's name for the fake's handle: the compatible handle itself.
FakeHandle = SandboxHandle

__all__ = ["AsyncFakeFleet", "FakeFleet", "FakeHandle"]
