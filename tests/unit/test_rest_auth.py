"""Bearer tokens of the REST API: the token file, 401/403 by role, and the dispatcher's wiring."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from sparkmill.common.config.configuration import Configuration
from sparkmill.common.core.errors import ConfigurationError
from sparkmill.common.rpc.keys import (
    generate_cluster_keys,
    generate_rest_tokens,
    read_rest_tokens,
    rest_token_of,
)
from sparkmill.common.runtime.settings import settings_from_config
from sparkmill.services.dispatcher.http_server import HttpRequest, HttpResponse, parse_target
from sparkmill.services.dispatcher.rest_api import AllowAll, RestApi, RestAuthorizer
from sparkmill.services.dispatcher.rest_auth import BearerTokenAuthorizer, authorizer_of
from tests.unit.rest_api_harness import JOB, STATIC, TestingClusterView, TestingGateway

VIEWER = "v" * 20
OPERATOR = "o" * 20


def _token_file(tmp_path: Path, text: str, mode: int = 0o600) -> Path:
    path = tmp_path / "rest.tokens"
    path.write_text(text)
    path.chmod(mode)
    return path


def _api(gateway: TestingGateway) -> RestApi:
    authorizer = BearerTokenAuthorizer([("viewer", VIEWER), ("operator", OPERATOR)])
    return RestApi(gateway, TestingClusterView(), STATIC, authorizer=authorizer)


def _call(
    api: RestApi, method: str, target: str, authorization: str | None = None
) -> tuple[HttpResponse, dict[str, Any]]:
    path, query = parse_target(target)
    headers = {"authorization": authorization} if authorization is not None else {}
    response = asyncio.run(api.handle(HttpRequest(method, path, query, headers, b"", target)))
    document = json.loads(response.body) if response.content_type == "application/json" else {}
    return response, document


# -- the token file ------------------------------------------------------------------------------


def test_a_token_file_gives_role_and_token_per_line(tmp_path: Path) -> None:
    path = _token_file(tmp_path, f"# comment\n\nviewer {VIEWER}\n  operator   {OPERATOR}  \n")
    assert read_rest_tokens(path, "rest.auth.token-file") == [
        ("viewer", VIEWER),
        ("operator", OPERATOR),
    ]


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        (f"admin {OPERATOR}\n", ":1: expected 'ROLE TOKEN'"),
        (f"viewer {VIEWER}\noperator\n", ":2: expected 'ROLE TOKEN'"),
        ("viewer short\n", ":1: the token must be at least 16"),
        ("# nothing\n", "holds no token"),
    ],
)
def test_a_bad_token_file_is_refused_naming_the_line_but_not_the_token(
    tmp_path: Path, text: str, needle: str
) -> None:
    path = _token_file(tmp_path, text)
    with pytest.raises(ConfigurationError, match=r"rest\.auth\.token-file") as info:
        read_rest_tokens(path, "rest.auth.token-file")
    assert needle in str(info.value)
    assert OPERATOR not in str(info.value)


@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_a_token_file_readable_by_others_is_refused(tmp_path: Path, mode: int) -> None:
    path = _token_file(tmp_path, f"viewer {VIEWER}\n", mode)
    with pytest.raises(ConfigurationError, match=f"chmod 600 {path}"):
        read_rest_tokens(path, "rest.auth.token-file")


def test_generated_tokens_are_private_random_and_kept(tmp_path: Path) -> None:
    made = generate_rest_tokens(tmp_path)
    assert made is not None and made.stat().st_mode & 0o777 == 0o600
    roles = [role for role, _ in read_rest_tokens(made, "k")]
    assert sorted(roles) == ["operator", "viewer"]
    operator = rest_token_of(made, "operator")
    assert len(operator) >= 32 and operator != rest_token_of(made, "viewer")
    assert generate_rest_tokens(tmp_path) is None  # never overwritten
    assert rest_token_of(made, "operator") == operator
    other = tmp_path / "other"
    assert any(p.name == "rest.tokens" for p in generate_cluster_keys(other))
    assert rest_token_of(other / "private" / "rest.tokens", "operator") != operator


# -- the authorizer ------------------------------------------------------------------------------


def test_without_a_token_or_with_a_wrong_one_every_api_call_is_401() -> None:
    gateway = TestingGateway()
    api = _api(gateway)
    for authorization in (None, "", "Bearer", f"Basic {OPERATOR}", f"Bearer {OPERATOR}x"):
        for method, target in (
            ("GET", "/v1/jobs"),
            ("GET", "/v1/config"),
            ("PATCH", f"/v1/jobs/{JOB}"),
        ):
            response, document = _call(api, method, target, authorization)
            assert response.status == 401, (authorization, target)
            assert response.headers["WWW-Authenticate"].startswith("Bearer")
            assert "token" in document["errors"][0]
    assert gateway.cancelled == []


def test_a_viewer_reads_but_may_not_cancel_or_submit() -> None:
    gateway = TestingGateway()
    api = _api(gateway)
    response, document = _call(api, "GET", "/v1/jobs", f"Bearer {VIEWER}")
    assert response.status == 200 and document["jobs"][0]["jid"] == JOB
    response, document = _call(api, "PATCH", f"/v1/jobs/{JOB}", f"bearer {VIEWER}")
    assert response.status == 403 and "operator token" in document["errors"][0]
    assert document["action"] == "cancel-job" and gateway.cancelled == []
    response, _ = _call(api, "POST", "/v1/jobs", f"Bearer {VIEWER}")
    assert response.status == 403 and gateway.submitted == []


def test_an_operator_may_cancel() -> None:
    gateway = TestingGateway()
    api = _api(gateway)
    response, _ = _call(api, "PATCH", f"/v1/jobs/{JOB}", f"Bearer {OPERATOR}")
    assert response.status == 202 and gateway.cancelled == [JOB]
    _, config = _call(api, "GET", "/v1/config", f"Bearer {OPERATOR}")
    assert config["authentication"] == "bearer"


def test_the_dashboards_files_need_no_token() -> None:
    response, _ = _call(_api(TestingGateway()), "GET", "/app.js")
    assert response.status == 200


def test_role_of_matches_whole_tokens_only() -> None:
    authorizer = BearerTokenAuthorizer([("viewer", VIEWER), ("operator", OPERATOR)])
    assert authorizer.role_of(OPERATOR) == "operator"
    assert authorizer.role_of(VIEWER) == "viewer"
    for guess in ("", OPERATOR[:-1], OPERATOR + "o", VIEWER.upper()):
        assert authorizer.role_of(guess) is None


# -- configuration -------------------------------------------------------------------------------


def test_the_dispatcher_takes_its_authorizer_from_the_configuration(tmp_path: Path) -> None:
    assert isinstance(_from_keys({"rest.auth.allow-unauthenticated": True}), AllowAll)
    assert isinstance(_from_keys({"rest.enabled": False}), AllowAll)
    path = _token_file(tmp_path, f"operator {OPERATOR}\n")
    authorizer = _from_keys({"rest.auth.token-file": f" {path} "})  # blanks around it: stripped
    assert isinstance(authorizer, BearerTokenAuthorizer)
    assert authorizer.role_of(OPERATOR) == "operator"
    path.chmod(0o644)
    with pytest.raises(ConfigurationError, match="chmod 600"):
        _from_keys({"rest.auth.token-file": str(path)})


def _from_keys(config: dict[str, object]) -> RestAuthorizer:
    return authorizer_of(settings_from_config(Configuration.from_mapping(config)))


def test_a_dispatcher_without_a_token_file_refuses_to_serve_an_open_api() -> None:
    with pytest.raises(ConfigurationError) as caught:
        _from_keys({})
    message = str(caught.value)
    assert "rest.auth.token-file" in message
    assert "rest.auth.allow-unauthenticated" in message  # the way out is named


def test_an_unauthenticated_request_is_refused_before_its_body_is_read() -> None:
    api = _api(TestingGateway())
    refused = api.admit("POST", "/v1/jobs", {"content-length": "62914560"})
    assert refused is not None and refused.status == 401
    assert refused.headers["WWW-Authenticate"].startswith("Bearer")
    wrong = api.admit("POST", "/v1/jobs", {"authorization": "Bearer nope"})
    assert wrong is not None and wrong.status == 401
    assert api.admit("POST", "/v1/jobs", {"authorization": f"Bearer {VIEWER}"}) is None
