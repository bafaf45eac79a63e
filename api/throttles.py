from __future__ import annotations

import time

from django.conf import settings
from django.core.cache import cache
from rest_framework.throttling import BaseThrottle

from config.env import parse_rate


class KeyRateThrottle(BaseThrottle):
    """A fixed-window request counter per API key, in the cache (Redis when REDIS_URL is set).

    One cache increment a request, whatever the rate, unlike DRF's SimpleRateThrottle which keeps
    every request's timestamp. The key's own `rate_limit` overrides the setting.
    """

    def allow_request(self, request, view) -> bool:
        key = request.auth
        limit, period = parse_rate(key.rate_limit or settings.DECISIONBOARD["INGEST_RATE_LIMIT"])
        now = time.time()
        window = int(now // period)
        cache_key = f"rate:{key.pk}:{period}:{window}"
        if cache.add(cache_key, 1, timeout=period + 1):
            count = 1
        else:
            try:
                count = cache.incr(cache_key)
            except ValueError:  # the window expired between add() and incr()
                cache.add(cache_key, 1, timeout=period + 1)
                count = 1
        self._wait = (window + 1) * period - now
        return count <= limit

    def wait(self) -> float:
        return self._wait
