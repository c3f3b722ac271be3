"""Starlette's StaticFiles, the Python way to serve static files (benches/static_files.py):
the directory named by $FERRULE_BENCH_STATIC_DIR, mounted at /static."""

from __future__ import annotations

import os

from starlette.applications import Starlette
from starlette.routing import Mount
from starlette.staticfiles import StaticFiles

DIRECTORY = os.environ["FERRULE_BENCH_STATIC_DIR"]

app = Starlette(routes=[Mount("/static", app=StaticFiles(directory=DIRECTORY))])
