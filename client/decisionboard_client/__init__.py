"""Send decision records to Decisionboard without ever slowing or breaking the agent."""

from __future__ import annotations

from decisionboard_client._client import Decisionboard as _Client
from decisionboard_client._kinds import KindMethods


class Decisionboard(KindMethods, _Client):
    __doc__ = _Client.__doc__


__all__ = ["Decisionboard"]
__version__ = "0.1.0"
