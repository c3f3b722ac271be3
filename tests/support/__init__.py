"""What several test folders share, imported as ``from support.serverutil import ...``
(``tests/`` is on ``sys.path``); what one folder's modules share stays in that folder:

- ``certs``: the CA, server and client certificates the TLS tests use, made at test time
- ``compressutil``: decoding and checks for the response-compression tests (``--compress``)
- ``h1raw``: a raw HTTP/1.1 client: exact request bytes, bounded reads, parsed responses
- ``h2get``: one GET over h2c with the ``h2`` library, the server's frames as its events
- ``h2raw``: a raw HTTP/2 client for attacks: frames and HPACK blocks made by hand
- ``h2ws``: a WebSocket over an HTTP/2 stream (RFC 8441), on h2c or TLS
- ``h3client``: a small HTTP/3 client on aioquic: requests, trailers, resets, GOAWAY
- ``loopkinds``: the event loops scenarios run on (asyncio, and uvloop where importable)
- ``memutil``: what a server process holds, read from ``/proc``: RSS and file descriptors
- ``proxyproto``: PROXY protocol headers made by hand, and the scope read back behind them
- ``serverutil``: the server under test as a process: start, wait, stop, bounded polls
- ``staticutil``: the tree the static-file tests serve, its mounts and the file checks
- ``wsutil``: WebSocket clients: the ``websockets`` library's, and raw frames by hand
"""
