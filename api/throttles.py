from __future__ import annotations

import logging
import time

from django.conf import settings
from django.core.cache import cache
from rest_framework.throttling import BaseThrottle

from config.env import parse_rate

log = logging.getLogger(__name__)


class KeyRateThrottle(BaseThrottle):
    """A fixed-window request counter per API key, in the cache (Redis when REDIS_URL is set).

    One cache increment a request, whatever the rate, unlike DRF's SimpleRateThrottle which keeps
    every request's timestamp. The key's own `rate_limit` overrides the setting. If the cache
    (Redis) is down the limit is not enforced: ingest never depends on Redis.
    """

    def allow_request(self, request, view) -> bool:
        return self.allow_key(request.auth)

    def allow_key(self, key) -> bool:
        """Whether `key` (an ApiKey) may make one more request now; wait() says how long
        until it may when not (the OTLP/gRPC receiver asks here without a DRF request)."""
        limit, period = parse_rate(key.rate_limit or settings.DECISIONBOARD["INGEST_RATE_LIMIT"])
        now = time.time()
        window = int(now // period)
        cache_key = f"rate:{key.pk}:{period}:{window}"
        self._wait = (window + 1) * period - now
        try:
            count = self._count(cache_key, period)
        except Exception as exc:  # the cache backend's own errors: fail open, loudly
            log.warning("rate limit not enforced: the cache is unavailable (%s)", exc)
            return True
        return count <= limit

    @staticmethod
    def _count(cache_key: str, period: int) -> int:
        if cache.add(cache_key, 1, timeout=period + 1):
            return 1
        try:
            return cache.incr(cache_key)
        except ValueError:  # the window expired between add() and incr()
            cache.add(cache_key, 1, timeout=period + 1)
            return 1

    def wait(self) -> float:
        return self._wait
