from django.urls import path

from audit_portal.dashboards import views

app_name = "dashboards"

urlpatterns = [
    path("", views.home, name="home"),
    path("glossary/", views.glossary, name="glossary"),
    path("p/<slug:slug>/", views.project_dashboard, name="project"),
    path("p/<slug:slug>/uploads/", views.uploads_page, name="uploads"),
    path("p/<slug:slug>/uploads/<int:pk>/", views.upload_detail, name="upload"),
    path("p/<slug:slug>/runs/", views.runs_page, name="runs"),
    path("p/<slug:slug>/runs/views/", views.save_view, name="save_view"),
    path("p/<slug:slug>/runs/views/<int:pk>/delete/", views.delete_view, name="delete_view"),
    path("p/<slug:slug>/runs/<int:pk>/", views.run_page, name="run"),
    path("p/<slug:slug>/runs/<int:pk>/sequences/", views.sequences_page, name="sequences"),
    path("p/<slug:slug>/compare/", views.compare_page, name="compare"),
    path("p/<slug:slug>/keys/", views.api_keys_page, name="api_keys"),
    path("p/<slug:slug>/keys/<int:pk>/revoke/", views.revoke_api_key, name="revoke_api_key"),
    path("jobs/<int:pk>/", views.job_page, name="job"),
    path("jobs/<int:pk>/result/", views.job_result, name="job_result"),
]
