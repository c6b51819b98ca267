from django.contrib import admin
from django.urls import include, path

from atp import urls as atp_urls  # first: it registers the converter of task numbers
from atp.views.headers import with_page_headers
from atp_demo import views

demo_patterns = ([
    path("", with_page_headers(views.home), name="home"),
    path("start/<slug:scenario>/", with_page_headers(views.start), name="start"),
    path("quilt/<atp_task_id:pk>/", with_page_headers(views.quilt), name="quilt"),
    path("quilt/<atp_task_id:pk>.json", with_page_headers(views.quilt_state), name="quilt_state"),
], "demo")

urlpatterns = [
    path("", include(demo_patterns)),
    path("admin/", admin.site.urls),
    path("atp/", include(atp_urls)),
]
