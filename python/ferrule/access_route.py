"""Which way a server's access lines go: the fast path (the server formats and writes each
line itself, no Python) while the access loggers are exactly as ferrule set them up, else
Python's ``logging``. Looked at again on every tick of the server's main loop, so that a filter,
handler or level an app sets while serving is honoured within a tick."""

from __future__ import annotations

import logging
from typing import Any

from ferrule._logging import (
    STATUS_PHRASES,
    access_colours,
    access_fields_wanted,
    access_path,
    access_stream_fd,
    access_writer,
)

logger = logging.getLogger("ferrule.error")


class AccessRouting:
    """Keeps ``http`` (the server core) on the access path the logging setup allows."""

    def __init__(self, http: Any, config: Any) -> None:
        self.http = http
        self.config = config
        self.route: tuple[str, str] | None = None
        self.fields: bool | None = None
        self.has_writer = False

    def update(self) -> None:
        """Switches the server to the path the logging setup allows now; says so at DEBUG
        when that changes."""
        config = self.config
        if not config.access_log:
            return
        fd = access_stream_fd()
        log_config = config.log_config is not None
        fields = access_fields_wanted(log_config)
        if fields != self.fields:
            self.http.access_fields = self.fields = fields
        route = access_path(log_config, -1 if fd is None else fd)
        if route == self.route:
            return
        path, why = route
        if path == "fast" and not self.has_writer:
            assert fd is not None
            json_lines = config.log_format == "json"
            writer = access_writer(fd, config.access_log_buffer, json_lines)
            self.http.set_access_writer(writer, access_colours(), STATUS_PHRASES)
            self.has_writer = True
        self.http.access_path = path
        self.route = route
        logger.debug("Access log path: %s (%s)", path, why)
