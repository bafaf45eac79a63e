"""A sign-in refused: the reason, said on a page with a 4xx, and no session left behind."""

from __future__ import annotations

import logging

from django.http import HttpRequest, HttpResponse
from django.template.loader import render_to_string

log = logging.getLogger(__name__)


class SignInRefused(Exception):
    """Raised anywhere in a sign-in to end it with `reason` as the answer, `status` its code."""

    def __init__(self, reason: str, status: int = 403) -> None:
        super().__init__(reason)
        self.reason = reason
        self.status = status


def refusal_page(request: HttpRequest, reason: str, status: int) -> HttpResponse:
    """The page saying why. The session that carried the sign-in's state is deleted, so a
    refused sign-in leaves no session row behind."""
    log.warning("single sign-on refused (%s): %s", status, reason)
    request.session.flush()
    body = render_to_string("sso/refused.html", {"reason": reason}, request=request)
    return HttpResponse(body, status=status)
