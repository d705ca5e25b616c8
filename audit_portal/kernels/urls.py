"""Pages of the kernels app (mounted at the site root by audit_portal/urls.py)."""

from django.urls import path

from audit_portal.kernels import views

app_name = "kernels"
urlpatterns = [
    path("contracts/", views.contract_list, name="contracts"),
    # contract ids contain slashes ("C-PRC-01/aten.mm/f32.f32->f32")
    path("contracts/<path:contract_id>/", views.contract_detail, name="contract"),
    path("p/<slug:slug>/kernels/", views.matrix_page, name="matrix"),
    path("p/<slug:slug>/kernels/submit/", views.submit_page, name="submit"),
    path("p/<slug:slug>/kernels/diff/", views.diff_page, name="diff"),
    path("p/<slug:slug>/kernels/submissions/<int:pk>/", views.submission_page, name="submission"),
    path("p/<slug:slug>/kernels/implementations/<int:pk>/badge/", views.badge_action, name="badge"),
    # public: the token in the URL is the only credential (README badges are fetched without cookies)
    path("badges/kernels/<str:token>.svg", views.public_badge, name="public-badge"),
]
