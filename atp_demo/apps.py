from django.apps import AppConfig


class AtpDemoConfig(AppConfig):
    name = "atp_demo"
    verbose_name = "django-atp demo"
