"""ferrule as a gunicorn worker: ``gunicorn -k ferrule.workers.FerruleWorker app:app``, the
line that takes the place of ``uvicorn.workers.UvicornWorker``. gunicorn's master binds the
sockets, starts and replaces the workers and handles their signals; each worker serves the
master's socket with ferrule's server, beats gunicorn's heartbeat from its event loop, and logs
through gunicorn's loggers. Needs gunicorn (``pip install gunicorn``), which ferrule does not."""

from __future__ import annotations

import asyncio
import logging
import signal
from typing import Any

from gunicorn.workers.base import Worker

from ferrule.config import Config
from ferrule.server import Server


class FerruleWorker(Worker):
    """A gunicorn worker serving an ASGI app with ferrule. ``CONFIG_KWARGS`` are ferrule
    settings given to every worker; a subclass may change them, as with uvicorn's worker:

        class MyWorker(FerruleWorker):
            CONFIG_KWARGS = {"loop": "asyncio", "http": "1"}
    """

    CONFIG_KWARGS: dict[str, Any] = {"loop": "auto", "http": "auto"}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        # ferrule's lines go out through the uvicorn loggers: given gunicorn's handlers, they
        # land in --error-logfile and --access-logfile (nowhere for the access lines when
        # gunicorn's access log is off), at gunicorn's --log-level.
        for name, gunicorn_logger in (
            ("uvicorn.error", self.log.error_log),
            ("uvicorn.access", self.log.access_log),
        ):
            logger = logging.getLogger(name)
            logger.handlers = gunicorn_logger.handlers
            logger.setLevel(gunicorn_logger.level)
            logger.propagate = False
        cfg = self.cfg
        options: dict[str, Any] = {
            "log_config": None,
            # gunicorn writes no access line without --access-logfile: nor does its worker.
            "access_log": bool(self.log.access_log.handlers),
            "timeout_keep_alive": cfg.keepalive,
            "timeout_graceful_shutdown": cfg.graceful_timeout,
            # gunicorn's --timeout: the heartbeat, from the event loop, twice a timeout.
            "callback_notify": self.callback_notify,
            "timeout_notify": self.timeout,
            # gunicorn's --max-requests with its jitter drawn (0: never).
            "limit_max_requests": self.max_requests if cfg.max_requests else None,
            "forwarded_allow_ips": cfg.forwarded_allow_ips,
        }
        if cfg.is_ssl:
            options.update(
                ssl_keyfile=cfg.ssl_options.get("keyfile"),
                ssl_certfile=cfg.ssl_options.get("certfile"),
                ssl_keyfile_password=cfg.ssl_options.get("password"),
                ssl_ca_certs=cfg.ssl_options.get("ca_certs"),
                ssl_ciphers=cfg.ssl_options.get("ciphers"),
                ssl_cert_reqs=cfg.ssl_options.get("cert_reqs"),
            )
        if cfg.settings["backlog"].value:
            options["backlog"] = cfg.settings["backlog"].value
        options.update(self.CONFIG_KWARGS)
        self.config = Config(None, **options)

    def init_signals(self) -> None:
        # gunicorn's handlers are for its threaded workers: the server's own stop TERM and INT
        # (graceful) on the loop; QUIT stops at once; USR1 reopens the log files.
        for signum in self.SIGNALS:
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGUSR1, self.handle_usr1)
        signal.siginterrupt(signal.SIGUSR1, False)

    def run(self) -> None:
        self.config.app = self.wsgi
        asyncio.run(self._serve())

    async def _serve(self) -> None:
        server = Server(self.config)
        loop = asyncio.get_running_loop()
        # QUIT: gunicorn's quick shutdown, what a second SIGINT is to ferrule.
        loop.add_signal_handler(signal.SIGQUIT, self._quit, server)
        # A server that cannot start raises SystemExit(3): gunicorn's WORKER_BOOT_ERROR too.
        await server.serve(sockets=list(self.sockets))

    def _quit(self, server: Server) -> None:
        server.should_exit = True
        server.force_exit = True

    async def callback_notify(self) -> None:
        self.notify()
