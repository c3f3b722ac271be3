"""RFC 9112 request rules, sections 6 to 9 (the message body, transfer codings, connection
management), as rows of the table ``test_rfc9112.py`` runs."""

from __future__ import annotations

from rfc9112_model import (
    ABNF,
    ERROR,
    MAY,
    MUST,
    MUST_NOT,
    OK,
    SHOULD,
    Outcome,
    case,
    dropped,
    echoed,
    echoed_nothing_of,
    head_length_matches_get,
    never_called,
    never_complete,
    paths_in_order,
    rejected,
    response_body,
    response_has,
    response_lacks,
    served,
)

CASES_BODY = [
    # -- 6 Message body ---------------------------------------------------------------------------
    case(
        "get-with-body",
        "6",
        MUST,
        "the presence of a message body in a request is signaled by Content-Length or "
        "Transfer-Encoding; request message framing is independent of method semantics",
        b"GET /echo/get-with-body HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\nhello"
        b"GET /echo/get-with-body/2 HTTP/1.1\r\nHost: t\r\n\r\n",
        served(
            echoed(0, body="hello"),
            echoed(1, path="/echo/get-with-body/2"),
            answers=(OK, OK),
            label="both served, the GET with its 5-byte body",
        ),
    ),
    case(
        "post-without-framing",
        "6.3",
        MUST,
        "(7) if this is a request message and none of the above are true, the message body "
        "length is zero: what follows is the next request",
        b"POST /echo/post-without-framing HTTP/1.1\r\nHost: t\r\n\r\n"
        b"GET /echo/post-without-framing/2 HTTP/1.1\r\nHost: t\r\n\r\n",
        served(
            echoed(0, body=""),
            echoed(1, path="/echo/post-without-framing/2"),
            answers=(OK, OK),
            label="both served, the POST with an empty body",
        ),
    ),
    case(
        "te-and-cl",
        "6.1",
        MUST,
        "a server MAY reject a request with both Content-Length and Transfer-Encoding or process "
        "it by the Transfer-Encoding alone; regardless, the server MUST close the connection "
        "after responding",
        b"POST /echo/te-and-cl HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Length: 3\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        rejected(close=True),
        served(echoed(body="hello"), close=True, label="served by Transfer-Encoding, then close"),
    ),
    case(
        "cl-and-te",
        "6.1",
        MUST,
        "both Content-Length and Transfer-Encoding (Content-Length first): reject, or use "
        "Transfer-Encoding; either way close after responding",
        b"POST /echo/cl-and-te HTTP/1.1\r\nHost: t\r\nContent-Length: 3\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        rejected(close=True),
        served(echoed(body="hello"), close=True, label="served by Transfer-Encoding, then close"),
    ),
    case(
        "te-in-http10",
        "6.1",
        MUST,
        "a server that receives an HTTP/1.0 message with Transfer-Encoding MUST treat the "
        "framing as faulty, even if a Content-Length is present, and close the connection after "
        "processing the message (here even with keep-alive asked for)",
        b"POST /echo/te-in-http10 HTTP/1.0\r\nConnection: keep-alive\r\n"
        b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        rejected(close=True),
        served(close=True, label="served, then close"),
    ),
    case(
        "te-unknown-coding-before-chunked",
        "6.1",
        SHOULD,
        "a server that receives a request message with a transfer coding it does not understand "
        "SHOULD respond with 501 (Not Implemented)",
        b"POST /echo/te-unknown-coding-before-chunked HTTP/1.1\r\nHost: t\r\n"
        b"Transfer-Encoding: gzip, chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        rejected(frozenset({501})),
    ),
    case(
        "te-chunked-not-final",
        "6.3",
        MUST,
        "(4) Transfer-Encoding in a request whose final coding is not chunked: the server MUST "
        "respond with 400 (Bad Request) and then close the connection",
        b"POST /echo/te-chunked-not-final HTTP/1.1\r\nHost: t\r\n"
        b"Transfer-Encoding: chunked, gzip\r\n\r\n0\r\n\r\n",
        rejected(close=True),
    ),
    case(
        "te-identity",
        "6.3",
        MUST,
        "(4) Transfer-Encoding without chunked as the final coding (identity): 400 and close",
        b"POST /echo/te-identity HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: identity\r\n\r\nhello",
        rejected(close=True),
    ),
    case(
        "content-length-not-a-number",
        "6.3",
        MUST,
        "(5) an invalid Content-Length without Transfer-Encoding: the server MUST respond with "
        "400 (Bad Request) and then close the connection",
        b"POST /echo/content-length-not-a-number HTTP/1.1\r\nHost: t\r\nContent-Length: five\r\n"
        b"\r\nhello",
        rejected(close=True),
    ),
    case(
        "content-length-negative",
        "6.3",
        MUST,
        "(5) Content-Length = 1*DIGIT; '-5' is invalid: 400 and close",
        b"POST /echo/content-length-negative HTTP/1.1\r\nHost: t\r\nContent-Length: -5\r\n\r\n"
        b"hello",
        rejected(close=True),
    ),
    case(
        "content-length-plus-sign",
        "6.3",
        MUST,
        "(5) Content-Length = 1*DIGIT; '+5' is invalid: 400 and close",
        b"POST /echo/content-length-plus-sign HTTP/1.1\r\nHost: t\r\nContent-Length: +5\r\n\r\n"
        b"hello",
        rejected(close=True),
    ),
    case(
        "content-length-differing-lines",
        "6.3",
        MUST,
        "(5) Content-Length lines with different values are invalid: 400 and close",
        b"POST /echo/content-length-differing-lines HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
        b"Content-Length: 6\r\n\r\nhello!",
        rejected(close=True),
    ),
    case(
        "content-length-differing-list",
        "6.3",
        MUST,
        "(5) a Content-Length list whose values differ is invalid: 400 and close",
        b"POST /echo/content-length-differing-list HTTP/1.1\r\nHost: t\r\n"
        b"Content-Length: 5, 6\r\n\r\nhello!",
        rejected(close=True),
    ),
    case(
        "content-length-same-list",
        "6.3",
        MAY,
        "(5) a list of identical valid values is processed with that single value; RFC 9110 8.6 "
        "lets a recipient reject it instead (then 400 and close)",
        b"POST /echo/content-length-same-list HTTP/1.1\r\nHost: t\r\nContent-Length: 5, 5\r\n"
        b"\r\nhello",
        rejected(close=True),
        served(echoed(body="hello"), label="served with a 5-byte body"),
    ),
    case(
        "content-length-same-lines",
        "6.3",
        MAY,
        "(5) two Content-Length lines of the same value: one valid value (RFC 9110 8.6: or "
        "reject, then 400 and close)",
        b"POST /echo/content-length-same-lines HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n"
        b"Content-Length: 5\r\n\r\nhello",
        rejected(close=True),
        served(echoed(body="hello"), label="served with a 5-byte body"),
    ),
    case(
        "content-length-leading-zeros",
        "6.2",
        ABNF,
        "Content-Length = 1*DIGIT: '0005' is a valid length of 5",
        b"POST /echo/content-length-leading-zeros HTTP/1.1\r\nHost: t\r\nContent-Length: 0005\r\n"
        b"\r\nhello",
        served(echoed(body="hello")),
    ),
    case(
        "content-length-overflow",
        "6.2",
        MUST,
        "a recipient MUST anticipate potentially large decimal numerals and prevent parsing "
        "errors due to integer conversion overflows (RFC 9110 8.6): 2**64+5 is not 5",
        b"POST /echo/content-length-overflow HTTP/1.1\r\nHost: t\r\n"
        b"Content-Length: 18446744073709551621\r\n\r\nhello",
        rejected(close=True),
        rejected(frozenset({413}), label="413 (too large to accept)"),
    ),
    case(
        "content-length-body-incomplete",
        "6.3",
        MUST,
        "(6) if the sender closes the connection before the indicated number of octets are "
        "received, the recipient MUST consider the message to be incomplete and close the "
        "connection",
        b"POST /echo/content-length-body-incomplete HTTP/1.1\r\nHost: t\r\nContent-Length: 10\r\n"
        b"\r\nhello",
        dropped(),
        rejected(ERROR, close=True, label="an error response, then close"),
        half_close=True,
    ),
    case(
        "head-incomplete",
        "8",
        MAY,
        "a server that receives an incomplete request message MAY send an error response prior "
        "to closing the connection (it must not process it)",
        b"GET /echo/head-incomplete HTTP/1.1\r\nHost: t\r\n",
        Outcome("no response, connection closed", (), True, (never_called(),)),
        Outcome("an error response, then close", (ERROR,), True, (never_called(),)),
        half_close=True,
    ),
    case(
        "response-no-transfer-encoding-to-http10",
        "6.1",
        MUST_NOT,
        "a server MUST NOT send a response containing Transfer-Encoding unless the "
        "corresponding request indicates HTTP/1.1 (here: a streamed body of unknown length)",
        b"GET /stream/response-no-transfer-encoding-to-http10 HTTP/1.0\r\n\r\n",
        served(
            response_lacks("transfer-encoding"),
            response_body(b"onetwo"),
            close=True,
            label="served close-delimited, no Transfer-Encoding",
        ),
    ),
    case(
        "response-204-no-framing",
        "6.1",
        MUST_NOT,
        "a server MUST NOT send Transfer-Encoding (6.1) or Content-Length (6.2) in any "
        "response with a status code of 204 (No Content) (here: streamed by the app)",
        b"GET /no-content/response-204-no-framing HTTP/1.1\r\nHost: t\r\n\r\n",
        served(
            response_lacks("transfer-encoding", "content-length"),
            answers=(frozenset({204}),),
            label="204 without Transfer-Encoding or Content-Length",
        ),
    ),
    case(
        "head-response-content-length",
        "6.2",
        MUST_NOT,
        "a server MUST NOT send Content-Length in a response to HEAD unless its value equals "
        "the octets the same GET would have had as content (and HEAD gets no content, 6.3)",
        b"HEAD /fixed/head-response-content-length HTTP/1.1\r\nHost: t\r\n\r\n"
        b"GET /fixed/head-response-content-length HTTP/1.1\r\nHost: t\r\n\r\n",
        served(
            head_length_matches_get,
            answers=(OK, OK),
            label="HEAD answered without content, its Content-Length the GET's",
        ),
        head=True,
    ),
    # -- 7 Transfer codings -----------------------------------------------------------------------
    case(
        "chunked",
        "7.1",
        MUST,
        "a recipient MUST be able to parse and decode the chunked transfer coding",
        b"POST /echo/chunked HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n",
        served(echoed(body="hello world")),
    ),
    case(
        "chunked-name-case-insensitive",
        "7",
        ABNF,
        "all transfer-coding names are case-insensitive: 'Chunked' is chunked",
        b"POST /echo/chunked-name-case-insensitive HTTP/1.1\r\nHost: t\r\n"
        b"Transfer-Encoding: Chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n",
        served(echoed(body="hello")),
    ),
    case(
        "chunk-size-hex",
        "7.1",
        ABNF,
        "chunk-size = 1*HEXDIG: upper and lower case digits, leading zeros",
        b"POST /echo/chunk-size-hex HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"A\r\n0123456789\r\na\r\nabcdefghij\r\n000000000000000000000A\r\nABCDEFGHIJ\r\n"
        b"0\r\n\r\n",
        served(echoed(body="0123456789abcdefghijABCDEFGHIJ")),
    ),
    case(
        "chunk-size-overflow",
        "7.1",
        MUST,
        "recipients MUST anticipate potentially large hexadecimal numerals and prevent parsing "
        "errors due to integer conversion overflows: 2**64+5 is not 5 (the framing is lost: "
        "close)",
        b"POST /echo/chunk-size-overflow HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
        b"\r\n10000000000000005\r\nhello\r\n0\r\n\r\n",
        rejected(close=True),
        rejected(frozenset({413}), close=True, label="413 and close"),
    ),
    case(
        "chunk-size-invalid",
        "7.1",
        SHOULD,
        "a chunk-size that is not 1*HEXDIG does not match the grammar: 400 and close (2.2, "
        "SHOULD); the body must not reach the app as complete",
        b"POST /echo/chunk-size-invalid HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        b"zz\r\nhello\r\n0\r\n\r\n",
        rejected(close=True),
    ),
    case(
        "chunk-extensions-ignored",
        "7.1.1",
        MUST,
        "a recipient MUST ignore unrecognized chunk extensions",
        b"POST /echo/chunk-extensions-ignored HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
        b'\r\n5;name=value\r\nhello\r\n6;flag;q="a;b"\r\n world\r\n0;last=yes\r\n\r\n',
        served(echoed(body="hello world")),
    ),
    case(
        "chunk-extension-bws",
        "7.1.1",
        ABNF,
        'chunk-ext = *( BWS ";" BWS chunk-ext-name [ BWS "=" BWS chunk-ext-val ] ): '
        "whitespace around ';' and '=' is valid, and ignored",
        b"POST /echo/chunk-extension-bws HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n\r\n"
        b'5 ; name = "quoted"\r\nhello\r\n0\r\n\r\n',
        served(echoed(body="hello")),
    ),
    case(
        "chunked-trailer-fields",
        "7.1.2",
        MUST_NOT,
        "a recipient MUST NOT merge a received trailer field into the header section unless "
        "its definition permits it (Host does not); the trailer section ends the body",
        b"POST /echo/chunked-trailer-fields HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
        b"\r\n5\r\nhello\r\n0\r\nX-Trailer: yes\r\nHost: evil\r\n\r\n"
        b"GET /echo/chunked-trailer-fields/2 HTTP/1.1\r\nHost: t\r\n\r\n",
        served(
            echoed(0, body="hello", host=["t"]),
            echoed_nothing_of("x-trailer"),
            echoed(1, path="/echo/chunked-trailer-fields/2"),
            answers=(OK, OK),
            label="both served, trailers not among the headers",
        ),
    ),
    case(
        "chunked-body-incomplete",
        "8",
        MUST,
        "a chunked message body is incomplete if the zero-sized last chunk has not been "
        "received; an incomplete message is not processed, the connection closes (6.3)",
        b"POST /echo/chunked-body-incomplete HTTP/1.1\r\nHost: t\r\nTransfer-Encoding: chunked\r\n"
        b"\r\n5\r\nhello\r\n",
        dropped(),
        rejected(ERROR, close=True, label="an error response, then close"),
        half_close=True,
    ),
    # -- 9 Connection management ------------------------------------------------------------------
    case(
        "http10-closes",
        "9.3",
        MUST,
        "HTTP/1.0 without the keep-alive option: the connection will close after the current "
        "response (the pipelined second request is not processed)",
        b"GET /echo/http10-closes HTTP/1.0\r\n\r\nGET /echo/http10-closes/2 HTTP/1.0\r\n\r\n",
        served(
            echoed(path="/echo/http10-closes"),
            never_complete("http10-closes/2"),
            close=True,
            label="one response, then close",
        ),
    ),
    case(
        "http10-keep-alive",
        "9.3",
        MAY,
        "HTTP/1.0 with keep-alive: the connection persists if the recipient wishes to honor "
        "it, else it closes after the current response",
        b"GET /echo/http10-keep-alive HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
        b"GET /echo/http10-keep-alive/2 HTTP/1.0\r\n\r\n",
        served(
            paths_in_order("/echo/http10-keep-alive", "/echo/http10-keep-alive/2"),
            answers=(OK, OK),
            close=True,
            label="kept alive: both served, close after the second",
        ),
        served(never_complete("http10-keep-alive/2"), close=True, label="one response, then close"),
    ),
    case(
        "connection-close",
        "9.6",
        MUST,
        "a server that receives a 'close' connection option MUST initiate closure of the "
        "connection after the final response to that request, and MUST NOT process any further "
        "requests received on that connection",
        b"GET /echo/connection-close HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n"
        b"GET /echo/connection-close/2 HTTP/1.1\r\nHost: t\r\n\r\n",
        served(
            echoed(path="/echo/connection-close"),
            never_complete("connection-close/2"),
            close=True,
            label="one response, then close",
        ),
    ),
    case(
        "connection-close-among-options",
        "9.6",
        MUST,
        "'close' among other connection options, in any case (options are case-insensitive, "
        "RFC 9110 7.6.1): close after the response, nothing further processed",
        b"GET /echo/connection-close-among-options HTTP/1.1\r\nHost: t\r\n"
        b"Connection: keep-alive, CLOSE\r\n\r\n"
        b"GET /echo/connection-close-among-options/2 HTTP/1.1\r\nHost: t\r\n\r\n",
        served(
            never_complete("connection-close-among-options/2"),
            close=True,
            label="one response, then close",
        ),
    ),
    case(
        "connection-close-second-line",
        "9.6",
        MUST,
        "'close' on a second Connection line (one field, its lines combined): close after the "
        "response, nothing further processed",
        b"GET /echo/connection-close-second-line HTTP/1.1\r\nHost: t\r\n"
        b"Connection: keep-alive\r\nConnection: close\r\n\r\n"
        b"GET /echo/connection-close-second-line/2 HTTP/1.1\r\nHost: t\r\n\r\n",
        served(
            never_complete("connection-close-second-line/2"),
            close=True,
            label="one response, then close",
        ),
    ),
    case(
        "connection-close-answered-close",
        "9.6",
        SHOULD,
        "the server SHOULD send a 'close' connection option in its final response on that "
        "connection",
        b"GET /echo/connection-close-answered-close HTTP/1.1\r\nHost: t\r\n"
        b"Connection: close\r\n\r\n",
        served(
            response_has("connection", "close"),
            close=True,
            label="served with Connection: close, then close",
        ),
    ),
    case(
        "unread-body",
        "9.3",
        MUST,
        "a server MUST read the entire request message body or close the connection after "
        "sending its response (an unread body must not be taken for the next request)",
        b"POST /no-read/unread-body HTTP/1.1\r\nHost: t\r\nContent-Length: 52\r\n\r\n"
        b"GET /echo/unread-body/smuggled HTTP/1.1\r\nHost: t\r\n\r\n"
        b"GET /echo/unread-body/after HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n",
        served(
            echoed(1, path="/echo/unread-body/after"),
            never_called("unread-body/smuggled"),
            answers=(OK, OK),
            label="body read and discarded: the next request served",
        ),
        served(never_called("unread-body/smuggled"), close=True, label="one response, then close"),
    ),
    case(
        "pipelined-in-order",
        "9.3.2",
        MUST,
        "a server MAY process pipelined requests in parallel, but it MUST send the "
        "corresponding responses in the same order that the requests were received (the "
        "first one here takes 0.3 s)",
        b"GET /sleep/pipelined-in-order/1 HTTP/1.1\r\nHost: t\r\n\r\n"
        b"GET /echo/pipelined-in-order/2 HTTP/1.1\r\nHost: t\r\n\r\n"
        b"GET /echo/pipelined-in-order/3 HTTP/1.1\r\nHost: t\r\n\r\n",
        served(
            paths_in_order(
                "/sleep/pipelined-in-order/1",
                "/echo/pipelined-in-order/2",
                "/echo/pipelined-in-order/3",
            ),
            answers=(OK, OK, OK),
            label="three responses in request order",
        ),
    ),
    case(
        "pipelined-with-bodies",
        "9.3.2",
        MUST,
        "pipelined requests with bodies (Content-Length, then chunked): each body ends where "
        "its framing says (6.3), the responses come in request order",
        b"POST /echo/pipelined-with-bodies/1 HTTP/1.1\r\nHost: t\r\nContent-Length: 5\r\n\r\n"
        b"hello"
        b"POST /echo/pipelined-with-bodies/2 HTTP/1.1\r\nHost: t\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n5\r\nworld\r\n0\r\n\r\n"
        b"GET /echo/pipelined-with-bodies/3 HTTP/1.1\r\nHost: t\r\n\r\n",
        served(
            paths_in_order(
                "/echo/pipelined-with-bodies/1",
                "/echo/pipelined-with-bodies/2",
                "/echo/pipelined-with-bodies/3",
            ),
            echoed(0, body="hello"),
            echoed(1, body="world"),
            echoed(2, body=""),
            answers=(OK, OK, OK),
            label="three responses in order, bodies as framed",
        ),
    ),
]
