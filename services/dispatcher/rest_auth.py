"""Bearer-token authentication of the REST API and the dashboard.

``rest.auth.token-file`` lists ``ROLE TOKEN`` lines (see
:func:`sparkmill.common.rpc.keys.read_rest_tokens`). A request presents one token as
``Authorization: Bearer TOKEN``. A ``viewer`` token may read (cluster, jobs, plans, results); an
``operator`` token may also submit and cancel. No token or an unknown one is answered ``401`` (with
``WWW-Authenticate: Bearer``), a known token asking for more than its role allows ``403``.

Tokens are compared in constant time: both sides are hashed to equal-length digests first,
and every configured token is compared, so neither the timing nor the position of a match
tells an attacker how much of a guess was right.
"""

from __future__ import annotations

import hashlib
import hmac
import logging
from collections.abc import Mapping
from pathlib import Path

from sparkmill.common.config import options as opt
from sparkmill.common.core.errors import ConfigurationError
from sparkmill.common.rpc.keys import read_rest_tokens
from sparkmill.common.runtime.settings import ClusterSettings
from sparkmill.services.dispatcher.http_server import HttpRequest
from sparkmill.services.dispatcher.rest_api import Action, AllowAll, Refusal, RestAuthorizer

log = logging.getLogger(__name__)

READ_ACTIONS = frozenset({Action.READ_CLUSTER, Action.READ_JOB})
ROLE_ACTIONS: dict[str, frozenset[Action]] = {
    "viewer": READ_ACTIONS,
    "operator": frozenset(Action),
}
INSECURE_REST_WARNING = (
    "the REST API and dashboard are UNAUTHENTICATED (rest.auth.token-file is not set): anyone "
    "who reaches the port can read every job and submit or cancel jobs"
)


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogateescape")).digest()


class BearerTokenAuthorizer:
    """The :class:`~.rest_api.RestAuthorizer` of ``rest.auth.token-file``."""

    name = "bearer"

    def __init__(self, tokens: list[tuple[str, str]]) -> None:
        if not tokens:
            raise ValueError("a bearer-token authorizer needs at least one token (a bug)")
        self._tokens = [(role, _digest(token)) for role, token in tokens]

    def role_of(self, token: str) -> str | None:
        """The role of ``token``, or None; constant time in the token's content."""
        candidate = _digest(token)
        found: str | None = None
        for role, digest in self._tokens:
            if hmac.compare_digest(candidate, digest) and found is None:
                found = role
        return found

    def _role(self, headers: Mapping[str, str]) -> str | Refusal:
        scheme, _, credentials = headers.get("authorization", "").strip().partition(" ")
        token = credentials.strip()
        if scheme.lower() != "bearer" or not token:
            return Refusal(
                401,
                "this API needs a token: send 'Authorization: Bearer TOKEN' with a token of "
                "the dispatcher's rest.auth.token-file",
            )
        role = self.role_of(token)
        if role is None:
            return Refusal(401, "the token is not valid (not in rest.auth.token-file)")
        return role

    def authenticate(self, headers: Mapping[str, str]) -> Refusal | None:
        role = self._role(headers)
        return role if isinstance(role, Refusal) else None

    def authorize(self, request: HttpRequest, action: Action) -> Refusal | None:
        role = self._role(request.headers)
        if isinstance(role, Refusal):
            return role
        if action not in ROLE_ACTIONS[role]:
            return Refusal(
                403,
                f"a {role} token may not {action.value.replace('-', ' ')}: that needs an "
                "operator token",
            )
        return None


def authorizer_of(settings: ClusterSettings) -> RestAuthorizer:
    """The REST authorizer of a dispatcher; a bad token file raises ConfigurationError (at
    start-up, before anything is bound, like the other secret files)."""
    path = settings.rest_auth_token_file
    if not path:
        if not settings.rest_enabled:
            return AllowAll()  # nothing is served
        if not settings.rest_auth_allow_unauthenticated:
            # Fail closed, like CurveZMQ without keys: an open API accepts jobs, i.e. code.
            raise ConfigurationError(
                opt.REST_AUTH_TOKEN_FILE.key,
                "the REST API is on (rest.enabled) but no token file is set, so anyone who "
                "reaches its port could submit and cancel jobs: set it to a file of "
                "'ROLE TOKEN' lines (`sparkmill keys generate --dir DIR` writes "
                "DIR/private/rest.tokens), or set rest.enabled: false, or "
                "rest.auth.allow-unauthenticated: true for an isolated lab",
            )
        log.warning("dispatcher: %s", INSECURE_REST_WARNING)
        return AllowAll()
    tokens = read_rest_tokens(Path(path), opt.REST_AUTH_TOKEN_FILE.key)
    log.info(
        "dispatcher: REST API needs bearer tokens (%d viewer, %d operator) from %s",
        sum(role == "viewer" for role, _ in tokens),
        sum(role == "operator" for role, _ in tokens),
        path,
    )
    return BearerTokenAuthorizer(tokens)
