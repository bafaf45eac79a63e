from __future__ import annotations

from django.urls import path

from dashboard import views

urlpatterns = [
    path("", views.overview, name="dash-overview"),
]
