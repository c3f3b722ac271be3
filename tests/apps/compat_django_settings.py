"""Django settings for ``compat_django`` (``DJANGO_SETTINGS_MODULE=compat_django_settings``): no
database, no installed apps, the URLconf in ``compat_django``; DEBUG off, so an unhandled
exception gives the plain 500 page."""

from __future__ import annotations

SECRET_KEY = "compat-django-test-only-not-secret"
DEBUG = False
ALLOWED_HOSTS = ["127.0.0.1", "localhost", "testserver"]
ROOT_URLCONF = "compat_django"
INSTALLED_APPS: list[str] = []
MIDDLEWARE = ["django.middleware.common.CommonMiddleware"]
DATABASES: dict[str, dict[str, str]] = {}
USE_TZ = True
#: Uploads above this go to a temporary file instead of memory.
FILE_UPLOAD_MAX_MEMORY_SIZE = 256 * 1024
DATA_UPLOAD_MAX_MEMORY_SIZE = 4 * 1024 * 1024
