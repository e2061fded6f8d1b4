"""The RPC layer end to end, calls: typed round trips, typed errors across the wire, unimplemented
methods and fencing tokens (a real RpcServer on loopback, real clients, real ZeroMQ sockets)."""

from __future__ import annotations

import pytest

from sparkmill.common.core.errors import (
    ErrorCode,
    FencingMismatchError,
    InternalError,
    InvalidArgumentError,
    InvalidJobGraphError,
    NotFoundError,
    NotLeaderError,
    UnimplementedError,
)
from sparkmill.common.rpc.framing import MethodSpec
from sparkmill.common.v1 import common_pb2, dispatcher_pb2
from sparkmill.common.v1.gateways import (
    DISPATCHERGATEWAY_METHODS,
    DispatcherClient,
)
from tests.unit.rpc_fakes import (
    SERVICE,
    TOKEN,
    CheckedDispatcher,
    job_graph,
    raw_reply,
    request_frames,
    run,
    serving,
)

# --- round trips -------------------------------------------------------------------------------


def test_typed_round_trip_submit_and_list_jobs() -> None:
    async def body() -> None:
        async with serving() as h:
            client = h.client()
            submitted = await client.submit_job(
                dispatcher_pb2.SubmitJobRequest(job_graph=job_graph("job-1", "wordcount", 3))
            )
            assert isinstance(submitted, dispatcher_pb2.SubmitJobResponse)
            assert submitted.job_id == "job-1"
            await client.submit_job(
                dispatcher_pb2.SubmitJobRequest(job_graph=job_graph("job-2", "etl"))
            )

            listed = await client.list_jobs(dispatcher_pb2.ListJobsRequest())
            assert [(j.job_id, j.name) for j in listed.jobs] == [
                ("job-1", "wordcount"),
                ("job-2", "etl"),
            ]
            details = await client.get_job_status(
                dispatcher_pb2.GetJobStatusRequest(job_id="job-1")
            )
            assert (details.job_id, details.name) == ("job-1", "wordcount")

            # The header travelled with the call: caller, token and the requested timeout.
            context = h.servicer.contexts[0]
            assert context.caller == "unit-test"
            assert context.fencing_token == TOKEN
            assert context.header.timeout_ms == 30_000  # SubmitJob's default_timeout_ms
            assert context.deadline == pytest.approx(context.received_at + 30.0)
            assert h.server.stats.requests["SubmitJob"] == 2
            assert h.server.stats.requests["ListJobs"] == 1
            assert not h.server.stats.errors
            assert not h.server.stats.malformed

    run(body)


# --- typed errors across the wire --------------------------------------------------------------


def test_not_found_crosses_the_wire_with_message_and_details() -> None:
    async def body() -> None:
        async with serving() as h:
            with pytest.raises(NotFoundError) as caught:
                await h.client().get_job_status(dispatcher_pb2.GetJobStatusRequest(job_id="nope"))
            assert type(caught.value) is NotFoundError
            assert caught.value.code == ErrorCode.NOT_FOUND
            assert caught.value.message == "job nope not found"
            assert str(caught.value) == "job nope not found"
            assert caught.value.details == "known jobs: 0"
            assert h.server.stats.errors["GetJobStatus:NOT_FOUND"] == 1

    run(body)


def test_invalid_job_graph_crosses_the_wire_as_the_subclass() -> None:
    async def body() -> None:
        async with serving() as h:
            empty = common_pb2.JobGraph(job_id="job-x", name="empty")
            with pytest.raises(InvalidJobGraphError) as caught:
                await h.client().submit_job(dispatcher_pb2.SubmitJobRequest(job_graph=empty))
            assert type(caught.value) is InvalidJobGraphError
            assert isinstance(caught.value, InvalidArgumentError)  # still catchable as the base
            assert caught.value.message == "job graph 'empty' has no vertices"
            assert caught.value.details == "vertices: []"
            assert h.servicer.jobs == {}

    run(body)


def test_not_leader_crosses_the_wire_from_handler_and_from_token_check() -> None:
    async def body() -> None:
        async with serving() as h:
            client = h.client()
            with pytest.raises(NotLeaderError) as caught:
                await client.register_job_master_process(
                    dispatcher_pb2.RegisterJobMasterProcessRequest(process_id="jm-1")
                )
            assert type(caught.value) is NotLeaderError
            assert caught.value.message == "lost leadership while registering"
            assert caught.value.details == "new leader: dispatcher-2"

            # expected_fencing_token() refusing (no longer leader) also becomes NotLeaderError.
            h.servicer.leading = False
            with pytest.raises(NotLeaderError) as caught:
                await client.list_jobs(dispatcher_pb2.ListJobsRequest())
            assert caught.value.message == "this dispatcher is not the leader"
            assert caught.value.details == "leader: elsewhere"

    run(body)


def test_unexpected_handler_exception_is_internal_and_server_keeps_serving() -> None:
    async def body() -> None:
        async with serving() as h:
            client = h.client()
            for _ in range(2):  # twice: the first failure must not have broken anything
                with pytest.raises(InternalError) as caught:
                    await client.cancel_job(dispatcher_pb2.CancelJobRequest(job_id="j#1"))
                assert type(caught.value) is InternalError
                assert "CancelJob failed inside test-dispatcher" in caught.value.message
                assert "ValueError (a bug; error id " in caught.value.message
                # The traceback and the exception's text stay in the service's log.
                assert "cannot parse" not in caught.value.message
                assert caught.value.details == ""
            assert h.server.stats.errors["CancelJob:INTERNAL"] == 2

            info = await client.get_service_info(common_pb2.GetServiceInfoRequest())
            assert info.id == "dispatcher-1"

    run(body)


def test_bad_ids_and_enums_are_refused_before_the_handler_runs() -> None:
    async def body() -> None:
        async with serving(servicer_type=CheckedDispatcher) as h:
            client = h.client()
            with pytest.raises(InvalidArgumentError) as caught:
                await client.cancel_job(dispatcher_pb2.CancelJobRequest(job_id="../../etc"))
            assert "CancelJobRequest.job_id '../../etc' is not valid" in caught.value.message
            report = dispatcher_pb2.JobStatusReport(job_id="0" * 32, status=77)  # type: ignore[arg-type]
            with pytest.raises(InvalidArgumentError) as caught:
                await client.report_job_status(report)
            assert "JobStatusReport.status is 77, not a JobStatus value" in caught.value.message
            assert h.servicer.contexts == []  # no handler ran
            assert h.server.stats.errors == {
                "CancelJob:INVALID_ARGUMENT": 1,
                "ReportJobStatus:INVALID_ARGUMENT": 1,
            }
            # A valid id reaches the handler (which, in this fake, is a bug: INTERNAL).
            with pytest.raises(InternalError):
                await client.cancel_job(dispatcher_pb2.CancelJobRequest(job_id="0" * 32))

    run(body)


def test_error_text_that_is_not_utf8_still_crosses_the_wire() -> None:
    """A surrogate-escaped file name in an error must not cost the caller its answer."""

    async def body() -> None:
        async with serving() as h:
            client = h.client()
            with pytest.raises(NotFoundError) as caught:
                await client.get_job_result(
                    dispatcher_pb2.GetJobResultRequest(job_id="typed"), timeout=5
                )
            assert caught.value.message == "no result file /results/typed-\\udcff.bin"
            assert caught.value.details == "looked at /results/typed-\\udcff.bin"

            with pytest.raises(InternalError) as internal:
                await client.get_job_result(
                    dispatcher_pb2.GetJobResultRequest(job_id="j1"), timeout=5
                )
            assert "FileNotFoundError" in internal.value.message
            assert "/results/" not in internal.value.message  # only in the service log
            assert h.server.stats.errors == {
                "GetJobResult:NOT_FOUND": 1,
                "GetJobResult:INTERNAL": 1,
            }

    run(body)


def test_handler_returning_the_wrong_type_is_internal() -> None:
    async def body() -> None:
        async with serving() as h:
            with pytest.raises(InternalError) as caught:
                await h.client().report_job_status(dispatcher_pb2.JobStatusReport(job_id="j"))
            assert "ReportJobStatus returned ListJobsResponse" in caught.value.message
            assert "sparkmill.v1.Empty" in caught.value.message

    run(body)


# --- unimplemented -----------------------------------------------------------------------------


def test_method_not_overridden_is_unimplemented() -> None:
    async def body() -> None:
        async with serving() as h:
            with pytest.raises(UnimplementedError) as caught:
                await h.client().get_cluster_services(dispatcher_pb2.GetClusterServicesRequest())
            assert caught.value.message == (
                "sparkmill.v1.DispatcherGateway.GetClusterServices is not implemented "
                "by this service"
            )
            assert h.server.stats.errors["GetClusterServices:UNIMPLEMENTED"] == 1

    run(body)


def test_unknown_service_and_unknown_method_are_unimplemented() -> None:
    async def body() -> None:
        async with serving() as h:
            list_jobs = DISPATCHERGATEWAY_METHODS["ListJobs"]
            with pytest.raises(UnimplementedError, match=r"does not serve sparkmill\.v1\.Nope"):
                await h.rpc.call(
                    "sparkmill.v1.Nope", list_jobs, dispatcher_pb2.ListJobsRequest(), timeout=5
                )
            bogus = MethodSpec(
                "Frobnicate",
                "frobnicate",
                dispatcher_pb2.ListJobsRequest,
                dispatcher_pb2.ListJobsResponse,
                fenced=False,
                default_timeout_s=5.0,
            )
            with pytest.raises(UnimplementedError, match="has no method 'Frobnicate'"):
                await h.rpc.call(SERVICE, bogus, dispatcher_pb2.ListJobsRequest(), timeout=5)

            # The same with hand-built headers from a raw socket: the reply echoes the id.
            sock = h.raw_socket()
            try:
                await sock.send_multipart(
                    request_frames(77, "ListJobs", b"", service="sparkmill.v1.Nope")
                )
                reply = await raw_reply(sock)
                assert (reply.request_id, reply.code) == (77, ErrorCode.UNIMPLEMENTED)
                assert "sparkmill.v1.Nope" in reply.message
                # Not even a method the servicer base knows as a handler attribute name.
                await sock.send_multipart(request_frames(78, "__init__", b""))
                reply = await raw_reply(sock)
                assert (reply.request_id, reply.code) == (78, ErrorCode.UNIMPLEMENTED)
                await sock.send_multipart(request_frames(79, "list_jobs", b""))
                reply = await raw_reply(sock)
                assert (reply.request_id, reply.code) == (79, ErrorCode.UNIMPLEMENTED)
            finally:
                sock.close(linger=0)
            assert not h.server.stats.malformed  # well-formed, merely unknown

    run(body)


# --- fencing -----------------------------------------------------------------------------------


def test_fenced_method_with_wrong_token_is_refused_naming_only_the_callers_prefix() -> None:
    async def body() -> None:
        async with serving() as h:
            stale = DispatcherClient(h.rpc, fencing_token="stale-session-fedcba9876")
            with pytest.raises(FencingMismatchError) as caught:
                await stale.submit_job(
                    dispatcher_pb2.SubmitJobRequest(job_graph=job_graph("job-1", "x"))
                )
            message = caught.value.message
            assert "SubmitJob refused" in message
            assert "stale-se" in message  # the caller's token, abbreviated
            # The leader's token is a secret a forger would need: not even a prefix is echoed.
            assert TOKEN[:8] not in message
            assert "fedcba9876" not in message
            assert "caller: unit-test" in message
            assert h.servicer.jobs == {}  # the stale leader's request was not obeyed
            assert h.server.stats.errors["SubmitJob:FENCING_MISMATCH"] == 1

    run(body)


def test_fenced_method_without_token_is_refused() -> None:
    async def body() -> None:
        async with serving() as h:
            with pytest.raises(FencingMismatchError) as caught:
                await h.client(fencing_token="").list_jobs(dispatcher_pb2.ListJobsRequest())
            assert "fencing token (none)" in caught.value.message
            assert TOKEN[:8] not in caught.value.message

            # The per-call token overrides the client's default (here: a correct one).
            listed = await h.client(fencing_token="").list_jobs(
                dispatcher_pb2.ListJobsRequest(), fencing_token=TOKEN
            )
            assert list(listed.jobs) == []

    run(body)


def test_correct_token_passes_and_follows_a_new_leader_session() -> None:
    async def body() -> None:
        async with serving() as h:
            client = h.client()
            await client.submit_job(
                dispatcher_pb2.SubmitJobRequest(job_graph=job_graph("job-1", "a"))
            )
            assert h.servicer.jobs == {"job-1": "a"}

            h.servicer.token = "next-session-42"  # a new leadership term
            with pytest.raises(FencingMismatchError):
                await client.list_jobs(dispatcher_pb2.ListJobsRequest())
            client.fencing_token = "next-session-42"
            listed = await client.list_jobs(dispatcher_pb2.ListJobsRequest())
            assert [j.job_id for j in listed.jobs] == ["job-1"]

    run(body)


def test_unfenced_get_service_info_needs_no_token() -> None:
    async def body() -> None:
        async with serving() as h:
            for token in ("", "garbage"):
                info = await h.client(fencing_token=token).get_service_info(
                    common_pb2.GetServiceInfoRequest()
                )
                assert (info.role, info.leader_session_id) == ("dispatcher", TOKEN)
            h.servicer.leading = False  # not even asked for a token: works on a follower too
            info = await h.client(fencing_token="").get_service_info(
                common_pb2.GetServiceInfoRequest()
            )
            assert info.is_leader is False

    run(body)
