"""REST API and web dashboard options (Flink's ``RestOptions``, ``WebOptions``)."""

from __future__ import annotations

from sparkmill.common.config.kinds import (
    BOOL,
    STRING,
)
from sparkmill.common.config.options._declare import group, option

# --------------------------------------------------------------------------------------------
group(
    "REST API and web dashboard",
    "The HTTP server of the dispatcher: the JSON API under /v1/ and the dashboard, with bearer "
    "tokens from rest.auth.token-file (see docs/security.md).",
)

REST_ENABLED = option(
    "rest.enabled",
    BOOL,
    True,
    "Serve the REST API and the web dashboard from every dispatcher (standbys redirect to the "
    "leader).",
)
REST_BIND_ADDRESS = option(
    "rest.bind-address",
    STRING,
    "127.0.0.1",
    "Host or interface the HTTP server binds to: loopback unless set, so a hand-written "
    "configuration never exposes the API by accident; this host's address (or '0.0.0.0' for "
    "all interfaces) to serve other hosts. Empty: the host of dispatcher.rpc-address.",
)
REST_ADDRESS = option(
    "rest.address",
    STRING,
    "",
    "Host name clients are given to reach the REST API (in redirects, `cluster status` and "
    "the URLs the CLI prints).",
    default_text="rest.bind-address, or this host's name when that is a wildcard",
)
REST_PORT = option(
    "rest.port",
    STRING,
    "8081",
    "Port of the HTTP server: a number, 0 for a free port, or a range such as '50100-50200' "
    "(the first free one is used, so several dispatchers on one host can share the setting).",
)
REST_AUTH_TOKEN_FILE = option(
    "rest.auth.token-file",
    STRING,
    "",
    "File (mode 0600) of the REST API's bearer tokens, one 'ROLE TOKEN' per line: 'viewer' "
    "tokens may read, 'operator' tokens may also submit and cancel. Required while "
    "rest.enabled is true, unless rest.auth.allow-unauthenticated is set for a lab.",
)
REST_AUTH_ALLOW_UNAUTHENTICATED = option(
    "rest.auth.allow-unauthenticated",
    BOOL,
    False,
    "Lab switch: serve the REST API and dashboard without rest.auth.token-file, open to anyone "
    "who reaches the port (who may then submit jobs, i.e. run code on the task executors). "
    "Without it a dispatcher with rest.enabled and no token file refuses to start.",
)
WEB_GRAFANA_URL = option(
    "web.grafana-url",
    STRING,
    "",
    "Base URL of a Grafana with the sparkmill dashboards; the dashboard links to it when set.",
)
