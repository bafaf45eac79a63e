"""The password login forms, which refuse every password when password login is off
(DECISIONBOARD_OIDC_PASSWORD_LOGIN): the login page's and the Django admin's."""

from __future__ import annotations

from django import forms
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth.forms import AuthenticationForm

from sso.provider import oidc

PASSWORD_LOGIN_OFF = "password_login_off"


def password_login_off_message() -> str:
    return (
        f"Password login is off here: sign in with {oidc().name} instead "
        "(the button on the login page)."
    )


def refuse_if_password_login_is_off() -> None:
    if not oidc().password_login:
        raise forms.ValidationError(password_login_off_message(), code=PASSWORD_LOGIN_OFF)


class PasswordLoginForm(AuthenticationForm):
    def clean(self):
        refuse_if_password_login_is_off()
        return super().clean()


class AdminPasswordLoginForm(AdminAuthenticationForm):
    def clean(self):
        refuse_if_password_login_is_off()
        return super().clean()
