"""The login page and the single sign-on's start and callback, under /accounts/ (config.urls
includes these before Django's own auth URLs, so this login page is the one served)."""

from django.urls import path

from sso import views

urlpatterns = [
    path("login/", views.LoginView.as_view(), name="login"),
    path("oidc/start/", views.sign_in_start, name="sso-start"),
    path("oidc/callback/", views.sign_in_callback, name="sso-callback"),
]
