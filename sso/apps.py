from django.apps import AppConfig


class SsoConfig(AppConfig):
    name = "sso"
    verbose_name = "Single sign-on"

    def ready(self) -> None:
        from django.contrib import admin

        from sso.forms import AdminPasswordLoginForm

        # The admin's login refuses passwords too when password login is off.
        admin.site.login_form = AdminPasswordLoginForm
