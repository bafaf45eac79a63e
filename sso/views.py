"""The login page, and the two ends of a sign-in at the provider: the start (a redirect to the
provider's authorization endpoint) and the callback (the provider's redirect back, with a code).

A refused sign-in answers the refusal page (sso.refusals) with a 4xx and its reason, whatever
refused it: the ID token (sso.backends), an unknown or replayed state (mozilla-django-oidc's
SuspiciousOperation), or the provider's own error answer. It never answers the library's
failure redirect, which could not say why.
"""

from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.core.exceptions import SuspiciousOperation
from django.http import Http404, HttpRequest, HttpResponse
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from sso.forms import PASSWORD_LOGIN_OFF, PasswordLoginForm
from sso.provider import library_setting, oidc
from sso.refusals import SignInRefused, refusal_page

UNKNOWN_STATE = (
    "This sign-in is unknown here or was already used (its state does not match one this "
    "browser started). Start again from the login page."
)


class LoginView(auth_views.LoginView):
    """Django's login page, with the single sign-on button when it is on; a password posted
    while password login is off is refused with a 403 saying single sign-on is the way in."""

    authentication_form = PasswordLoginForm

    def get_context_data(self, **kwargs):
        context = super().get_context_data(**kwargs)
        context["sso"] = oidc()
        return context

    def form_invalid(self, form):
        response = super().form_invalid(form)
        if form.has_error("__all__", PASSWORD_LOGIN_OFF):
            response.status_code = 403
        return response


class SignInStartView(OIDCAuthenticationRequestView):
    def get_settings(self, attr, *args):
        return library_setting(attr, *args)


class SignInCallbackView(OIDCAuthenticationCallbackView):
    def get_settings(self, attr, *args):
        return library_setting(attr, *args)

    def get(self, request: HttpRequest) -> HttpResponse:
        try:
            return super().get(request)
        except SignInRefused as refused:
            return refusal_page(request, refused.reason, refused.status)
        except SuspiciousOperation:
            return refusal_page(request, UNKNOWN_STATE, 400)

    def login_failure(self) -> HttpResponse:
        request = self.request
        if request.GET.get("error"):
            said = request.GET.get("error_description") or request.GET["error"]
            return refusal_page(request, f"The provider refused the sign-in: {said}.", 403)
        user = getattr(self, "user", None)
        if user is not None and not user.is_active:
            return refusal_page(request, "This account is disabled.", 403)
        return refusal_page(request, UNKNOWN_STATE, 400)


def sign_in_start(request: HttpRequest) -> HttpResponse:
    if not oidc().enabled:
        raise Http404("Single sign-on is not configured.")
    try:
        return SignInStartView.as_view()(request)
    except SignInRefused as refused:
        return refusal_page(request, refused.reason, refused.status)


def sign_in_callback(request: HttpRequest) -> HttpResponse:
    if not oidc().enabled:
        raise Http404("Single sign-on is not configured.")
    return SignInCallbackView.as_view()(request)
