"""The app Autobahn|Testsuite's fuzzing client is run against (scripts/autobahn.sh): the
WebSocket benchmark's app, which echoes every message as it came (text as text, bytes as bytes)
on any path but ``/broadcast``, and answers plain HTTP (the readiness probe) with 200."""

from ws_apps import app

__all__ = ["app"]
