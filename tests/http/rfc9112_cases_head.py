"""RFC 9112 request rules, sections 2 to 5 (message parsing, the HTTP version, the request
line, Host, the request-target forms, field syntax), as rows of the table ``test_rfc9112.py``
runs."""

from __future__ import annotations

from rfc9112_model import (
    ABNF,
    ERROR,
    HEAD_LIMIT,
    INVALID_LINE,
    MAY,
    MUST,
    MUST_NOT,
    SHOULD,
    case,
    echoed,
    echoed_header,
    echoed_nothing_of,
    line_of,
    rejected,
    response_version,
    served,
)

CASES_HEAD = [
    # -- 2.2 Message parsing --------------------------------------------------------------------
    case(
        "leading-empty-line",
        "2.2",
        SHOULD,
        "a server that is expecting to receive and parse a request-line SHOULD ignore at least "
        "one empty line (CRLF) received prior to the request-line",
        b"\r\nGET /echo/leading-empty-line HTTP/1.1\r\nHost: t\r\n\r\n",
        served(echoed(path="/echo/leading-empty-line")),
    ),
    case(
        "whitespace-before-first-field",
        "2.2",
        MUST,
        "a recipient that receives whitespace between the start-line and the first header field "
        "MUST either reject the message as invalid or consume each whitespace-preceded line "
        "without further processing of it",
        b"GET /echo/whitespace-before-first-field HTTP/1.1\r\n X-Ws-Line: 1\r\nHost: t\r\n\r\n",
        rejected(),
        served(
            echoed(path="/echo/whitespace-before-first-field"),
            echoed_nothing_of("ws-line"),
            label="served with the whitespace-preceded line ignored",
        ),
    ),
    case(
        "bare-cr-in-field-value",
        "2.2",
        MUST,
        "a recipient of a bare CR MUST consider that element to be invalid or replace each bare "
        "CR with SP before processing the element",
        b"GET /echo/bare-cr-in-field-value HTTP/1.1\r\nHost: t\r\nX-Bare: one\rtwo\r\n\r\n",
        rejected(),
        served(echoed_header("x-bare", "one two"), label="served with the CR replaced by SP"),
    ),
    case(
        "bare-cr-in-field-name",
        "2.2",
        MUST,
        "bare CR: the element is invalid, or the CR becomes SP (and a field name with SP in it "
        "is invalid, 5.1)",
        b"GET /echo/bare-cr-in-field-name HTTP/1.1\r\nHost: t\r\nX-Bare\rName: one\r\n\r\n",
        rejected(),
    ),
    case(
        "bare-cr-in-request-line",
        "2.2",
        MUST,
        "bare CR: the element is invalid, or the CR becomes SP (whitespace that section 3 lets "
        "a recipient parse leniently as a separator)",
        b"GET /echo/bare-cr-in-request-line\r HTTP/1.1\r\nHost: t\r\n\r\n",
        rejected(INVALID_LINE),
        served(
            echoed(path="/echo/bare-cr-in-request-line"), label="served with the CR taken as SP"
        ),
    ),
    case(
        "bare-lf-line-ends",
        "2.2",
        MAY,
        "a recipient MAY recognize a single LF as a line terminator and ignore any preceding CR",
        b"GET /echo/bare-lf-line-ends HTTP/1.1\nHost: t\n\n",
        rejected(),
        served(echoed(path="/echo/bare-lf-line-ends", host=["t"])),
    ),
    case(
        "not-http",
        "2.2",
        SHOULD,
        "a server that receives a sequence of octets that does not match the HTTP-message "
        "grammar SHOULD respond with a 400 (Bad Request) response and close the connection",
        b"not-http: these bytes are no HTTP request\r\n\r\n",
        rejected(close=True),
    ),
    # -- 2.3 HTTP version ---------------------------------------------------------------------
    case(
        "version-lowercase",
        "2.3",
        SHOULD,
        'HTTP-name = %s"HTTP" is case-sensitive: an invalid request-line, which SHOULD get 400 '
        "or 301 (3)",
        b"GET /echo/version-lowercase http/1.1\r\nHost: t\r\n\r\n",
        rejected(INVALID_LINE),
    ),
    case(
        "version-two-digit-major",
        "2.3",
        SHOULD,
        'HTTP-version = HTTP-name "/" DIGIT "." DIGIT: HTTP/11 is an invalid request-line '
        "(400 or 301, 3)",
        b"GET /echo/version-two-digit-major HTTP/11\r\nHost: t\r\n\r\n",
        rejected(INVALID_LINE),
    ),
    case(
        "version-missing",
        "2.3",
        SHOULD,
        "request-line = method SP request-target SP HTTP-version: without a version it is "
        "invalid (400 or 301, 3; or 505 for the HTTP/0.9 it would be)",
        b"GET /echo/version-missing\r\nHost: t\r\n\r\n",
        rejected(INVALID_LINE | {505}),
    ),
    case(
        "version-major-2",
        "2.3",
        MAY,
        "a server can send 505 (HTTP Version Not Supported) to refuse the client's major "
        "version (RFC 9110 2.5, 15.6.6); HTTP/2.0 is no HTTP/1.1 request-line",
        b"GET /echo/version-major-2 HTTP/2.0\r\nHost: t\r\n\r\n",
        rejected(frozenset({400, 505})),
    ),
    case(
        "version-higher-minor",
        "2.3",
        SHOULD,
        "a recipient that receives a message with a major version number that it implements and "
        "a higher minor version SHOULD process it as if it were in the highest minor version it "
        "conforms to (RFC 9110 2.5)",
        b"GET /echo/version-higher-minor HTTP/1.2\r\nHost: t\r\n\r\n",
        served(echoed(path="/echo/version-higher-minor"), label="served as HTTP/1.1"),
    ),
    case(
        "response-version-to-http10",
        "2.3",
        SHOULD,
        "a server SHOULD send a response version equal to the highest version to which it is "
        "conformant whose major version is <= the request's (RFC 9110 2.5): HTTP/1.1",
        b"GET /echo/response-version-to-http10 HTTP/1.0\r\n\r\n",
        served(response_version("HTTP/1.1"), label="served, status-line HTTP/1.1"),
    ),
    # -- 3 Request line -------------------------------------------------------------------------
    case(
        "method-not-a-token",
        "3.1",
        SHOULD,
        "method = token: '(' is no tchar, an invalid request-line (400 or 301, 3)",
        b"G(ET /echo/method-not-a-token HTTP/1.1\r\nHost: t\r\n\r\n",
        rejected(INVALID_LINE),
    ),
    case(
        "method-case-sensitive",
        "3.1",
        ABNF,
        "the method token is case-sensitive: 'get' is not GET (served as 'get', or refused)",
        b"get /echo/method-case-sensitive HTTP/1.1\r\nHost: t\r\n\r\n",
        served(echoed(method="get"), label="served, the app sees method 'get'"),
        rejected(frozenset({400, 405, 501})),
    ),
    case(
        "request-line-two-spaces",
        "3",
        MAY,
        "recipients MAY parse the request-line on whitespace-delimited word boundaries (or "
        "reject it: it is not method SP request-target SP HTTP-version)",
        b"GET  /echo/request-line-two-spaces HTTP/1.1\r\nHost: t\r\n\r\n",
        rejected(INVALID_LINE),
        served(echoed(path="/echo/request-line-two-spaces")),
    ),
    case(
        "target-with-space",
        "3",
        SHOULD,
        "a request-target has no whitespace: four words make an invalid request-line (400 or "
        "301), which a recipient SHOULD NOT autocorrect and process",
        b"GET /echo/target-with-space x HTTP/1.1\r\nHost: t\r\n\r\n",
        rejected(INVALID_LINE),
    ),
    case(
        "request-line-8000-octets",
        "3",
        SHOULD,
        "it is RECOMMENDED that all HTTP recipients support request-line lengths of at least "
        "8000 octets",
        line_of(8000, "request-line-8000-octets") + b"\r\nHost: t\r\n\r\n",
        served(echoed(path="/echo/request-line-8000-octets")),
    ),
    case(
        "request-line-over-limit",
        "3",
        MUST,
        "a server that receives a request-target longer than any URI it wishes to parse MUST "
        f"respond with 414 (URI Too Long): a 12000-octet line, past its {HEAD_LIMIT}-byte limit",
        line_of(12000, "request-line-over-limit") + b"\r\nHost: t\r\n\r\n",
        rejected(frozenset({414})),
    ),
    case(
        "request-line-over-buffer",
        "3",
        MUST,
        "a request-target longer than the server wishes to parse MUST get 414 (URI Too Long), "
        "however long: a 24000-octet line",
        line_of(24000, "request-line-over-buffer") + b"\r\nHost: t\r\n\r\n",
        rejected(frozenset({414})),
    ),
    # -- 3.2 Host -------------------------------------------------------------------------------
    case(
        "host-missing",
        "3.2",
        MUST,
        "a server MUST respond with 400 (Bad Request) to any HTTP/1.1 request message that "
        "lacks a Host header field",
        b"GET /echo/host-missing HTTP/1.1\r\nConnection: close\r\n\r\n",
        rejected(),
    ),
    case(
        "host-twice-same",
        "3.2",
        MUST,
        "... and to any request message that contains more than one Host header field line",
        b"GET /echo/host-twice-same HTTP/1.1\r\nHost: t\r\nHost: t\r\n\r\n",
        rejected(),
    ),
    case(
        "host-twice-different",
        "3.2",
        MUST,
        "more than one Host header field line: 400",
        b"GET /echo/host-twice-different HTTP/1.1\r\nHost: one\r\nHost: two\r\n\r\n",
        rejected(),
    ),
    case(
        "host-twice-http10",
        "3.2",
        MUST,
        "more than one Host line in ANY request message (HTTP/1.0 too): 400",
        b"GET /echo/host-twice-http10 HTTP/1.0\r\nHost: t\r\nHost: t\r\n\r\n",
        rejected(),
    ),
    case(
        "host-invalid-space",
        "3.2",
        MUST,
        "... or a Host header field with an invalid field value (Host = uri-host [':' port]): 400",
        b"GET /echo/host-invalid-space HTTP/1.1\r\nHost: host invalid\r\nConnection: close\r\n\r\n",
        rejected(),
    ),
    case(
        "host-invalid-slash",
        "3.2",
        MUST,
        "invalid Host value ('/' is not in uri-host): 400",
        b"GET /echo/host-invalid-slash HTTP/1.1\r\nHost: host/invalid\r\nConnection: close\r\n\r\n",
        rejected(),
    ),
    case(
        "host-invalid-userinfo",
        "3.2",
        MUST,
        "invalid Host value (userinfo '@' is not in uri-host): 400",
        b"GET /echo/host-invalid-userinfo HTTP/1.1\r\nHost: user@host-invalid-userinfo\r\n"
        b"Connection: close\r\n\r\n",
        rejected(),
    ),
    case(
        "host-invalid-port",
        "3.2",
        MUST,
        "invalid Host value (port = *DIGIT): 400",
        b"GET /echo/host-invalid-port HTTP/1.1\r\nHost: host-invalid-port:http\r\n"
        b"Connection: close\r\n\r\n",
        rejected(),
    ),
    # -- 3.2.1-3.2.4 Request target forms ---------------------------------------------------------
    case(
        "origin-form",
        "3.2.1",
        ABNF,
        'origin-form = absolute-path [ "?" query ]: the path and the query, apart',
        b"GET /echo/origin-form/a%20b?x=1&y=%20 HTTP/1.1\r\nHost: t\r\n\r\n",
        served(
            echoed(
                path="/echo/origin-form/a b",
                raw_path="/echo/origin-form/a%20b",
                query_string="x=1&y=%20",
            )
        ),
    ),
    case(
        "absolute-form-accepted",
        "3.2.2",
        MUST,
        "a server MUST accept the absolute-form in requests",
        b"GET http://absolute-form-accepted.example/echo/absolute-form-accepted?q=1 HTTP/1.1\r\n"
        b"Host: absolute-form-accepted.example\r\n\r\n",
        served(
            echoed(path="/echo/absolute-form-accepted", query_string="q=1", scheme="http"),
            label="served with the target's path and query",
        ),
    ),
    case(
        "absolute-form-host-overrides",
        "3.2.2",
        MUST,
        "an origin server that receives the absolute-form MUST ignore the received Host header "
        "field and instead use the host information of the request-target",
        b"GET http://target.example:8080/echo/absolute-form-host-overrides HTTP/1.1\r\n"
        b"Host: other.example\r\n\r\n",
        served(
            echoed(path="/echo/absolute-form-host-overrides", host=["target.example:8080"]),
            label="served, the app's Host is the target's authority",
        ),
        rejected(frozenset({421}), label="421 Misdirected Request (not an authority it serves)"),
    ),
    case(
        "authority-form-connect",
        "3.2.3",
        MUST_NOT,
        "the authority-form is only used for CONNECT; a server with no tunnel to offer must not "
        "answer 2xx, which means the tunnel is open (RFC 9110 9.3.6)",
        b"CONNECT authority-form-connect.example:443 HTTP/1.1\r\n"
        b"Host: authority-form-connect.example:443\r\n\r\n",
        rejected(ERROR),
    ),
    case(
        "authority-form-with-get",
        "3.2.3",
        SHOULD,
        "the authority-form is only used for CONNECT: with GET, an invalid request-line (400 or "
        "301)",
        b"GET authority-form-with-get.example:80 HTTP/1.1\r\n"
        b"Host: authority-form-with-get.example:80\r\n\r\n",
        rejected(INVALID_LINE),
    ),
    case(
        "connect-with-origin-form",
        "3.2.3",
        SHOULD,
        "CONNECT takes the authority-form only: with a path it is invalid (refused, never 2xx)",
        b"CONNECT /echo/connect-with-origin-form HTTP/1.1\r\nHost: t\r\n\r\n",
        rejected(ERROR),
    ),
    case(
        "asterisk-form-options",
        "3.2.4",
        ABNF,
        "asterisk-form = '*', used for a server-wide OPTIONS request: a valid request, served",
        b"OPTIONS * HTTP/1.1\r\nHost: asterisk-form-options\r\n\r\n",
        served(
            echoed(method="OPTIONS", path="*"), label="served, the app sees OPTIONS with path *"
        ),
    ),
    case(
        "asterisk-form-with-get",
        "3.2.4",
        SHOULD,
        "the asterisk-form is only used for OPTIONS: with GET, an invalid request-line (400 or "
        "301)",
        b"GET * HTTP/1.1\r\nHost: asterisk-form-with-get\r\n\r\n",
        rejected(INVALID_LINE),
    ),
    # -- 5 Field syntax ---------------------------------------------------------------------------
    case(
        "space-before-colon",
        "5.1",
        MUST,
        "a server MUST reject, with 400 (Bad Request), any received request message that "
        "contains whitespace between a header field name and colon",
        b"GET /echo/space-before-colon HTTP/1.1\r\nHost: t\r\nX-Name : value\r\n\r\n",
        rejected(),
    ),
    case(
        "tab-before-colon",
        "5.1",
        MUST,
        "whitespace (here HTAB) between a header field name and colon: 400",
        b"GET /echo/tab-before-colon HTTP/1.1\r\nHost: t\r\nX-Name\t: value\r\n\r\n",
        rejected(),
    ),
    case(
        "field-value-ows-excluded",
        "5.1",
        ABNF,
        "OWS before the first or after the last non-whitespace octet of a field line value is "
        "excluded by parsers when extracting the field line value",
        b"GET /echo/field-value-ows-excluded HTTP/1.1\r\nHost: t\r\n"
        b"X-Ows: \t padded value \t \r\n\r\n",
        served(echoed_header("x-ows", "padded value")),
    ),
    case(
        "obs-fold-space",
        "5.2",
        MUST,
        "a server that receives an obs-fold in a request MUST either reject the message with "
        "400 or replace each obs-fold with one or more SP before interpreting the field value",
        b"GET /echo/obs-fold-space HTTP/1.1\r\nHost: t\r\nX-Fold: first\r\n second\r\n\r\n",
        rejected(),
        served(echoed_header("x-fold", "first +second"), label="served, obs-fold as SP"),
    ),
    case(
        "obs-fold-tab",
        "5.2",
        MUST,
        "obs-fold = OWS CRLF RWS (here HTAB): 400, or SP in its place",
        b"GET /echo/obs-fold-tab HTTP/1.1\r\nHost: t\r\nX-Fold: first\r\n\tsecond\r\n\r\n",
        rejected(),
        served(echoed_header("x-fold", "first +second"), label="served, obs-fold as SP"),
    ),
]
