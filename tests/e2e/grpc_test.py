"""gRPC front end (proto/pagoda.proto) with a real grpcio client whose stubs are generated from
the repository's .proto at test time (grpc_tools.protoc)."""
import importlib
import pathlib
import sys
import threading
import time

import grpc
import pytest
from grpc_tools import protoc

from conftest import TINY_MODEL, Server, free_port

PROTO_DIR = pathlib.Path(__file__).resolve().parents[2] / "proto"


@pytest.fixture(scope="module")
def pb(tmp_path_factory):
    out = tmp_path_factory.mktemp("grpc_stubs")
    include = pathlib.Path(protoc.__file__).parent / "_proto"
    rc = protoc.main(["protoc", f"-I{PROTO_DIR}", f"-I{include}", f"--python_out={out}", f"--grpc_python_out={out}",
                      str(PROTO_DIR / "pagoda.proto")])
    assert rc == 0
    sys.path.insert(0, str(out))
    return importlib.import_module("pagoda_pb2"), importlib.import_module("pagoda_pb2_grpc")


@pytest.fixture(scope="module")
def server():
    port = free_port()
    s = Server(TINY_MODEL, "--max-model-len", 2048, "--grpc-port", port, "--api-key", "secret")
    s.grpc_port = port
    yield s
    s.kill()


def stub_for(pb, port):
    _, pb_grpc = pb
    channel = grpc.insecure_channel(f"127.0.0.1:{port}")
    grpc.channel_ready_future(channel).result(timeout=30)
    return pb_grpc.PagodaStub(channel)


AUTH = (("authorization", "Bearer secret"),)


def test_generate_stream_and_tokenize(pb, server):
    pb2, _ = pb
    stub = stub_for(pb, server.grpc_port)
    health = stub.Health(pb2.HealthRequest())
    assert health.status == pb2.HealthResponse.SERVING and health.model == "stories260K"
    ids = stub.Tokenize(pb2.TokenizeRequest(text="Once upon a time", add_special_tokens=True), metadata=AUTH).token_ids
    assert len(ids) > 1
    responses = list(stub.Generate(pb2.GenerateRequest(prompt="Once upon a time", max_tokens=10, temperature=0),
                                   metadata=AUTH))
    text = "".join(r.text for r in responses)
    assert text.startswith(", there was a little girl named Lily")
    assert responses[-1].finished and responses[-1].finish_reason == "length"
    assert responses[-1].completion_tokens == 10 and responses[-1].prompt_tokens == len(ids)
    assert sum(len(r.token_ids) for r in responses) == 10
    by_ids = list(stub.Generate(pb2.GenerateRequest(prompt_ids=list(ids), max_tokens=10, temperature=0), metadata=AUTH))
    assert "".join(r.text for r in by_ids) == text
    stopped = list(stub.Generate(pb2.GenerateRequest(prompt="Once upon a time", max_tokens=20, temperature=0,
                                                     stop=["little"]), metadata=AUTH))
    assert stopped[-1].finish_reason == "stop" and "little" not in "".join(r.text for r in stopped)


def test_status_codes(pb, server):
    pb2, _ = pb
    stub = stub_for(pb, server.grpc_port)
    cases = [
        (pb2.GenerateRequest(prompt="x", max_tokens=2), (), grpc.StatusCode.UNAUTHENTICATED),
        (pb2.GenerateRequest(prompt="x", max_tokens=2), (("authorization", "Bearer nope"),), grpc.StatusCode.UNAUTHENTICATED),
        (pb2.GenerateRequest(prompt="x", max_tokens=2, temperature=-1), AUTH, grpc.StatusCode.INVALID_ARGUMENT),
        (pb2.GenerateRequest(prompt="x", max_tokens=100000), AUTH, grpc.StatusCode.OUT_OF_RANGE),
        (pb2.GenerateRequest(prompt_ids=[999999], max_tokens=2), AUTH, grpc.StatusCode.INVALID_ARGUMENT),
        (pb2.GenerateRequest(prompt="", max_tokens=2), AUTH, grpc.StatusCode.INVALID_ARGUMENT),
    ]
    for req, md, code in cases:
        with pytest.raises(grpc.RpcError) as e:
            list(stub.Generate(req, metadata=md))
        assert e.value.code() == code, (req, e.value.details())


def test_client_cancel_cancels_request(pb, server):
    pb2, _ = pb
    stub = stub_for(pb, server.grpc_port)
    before = server.metric("pagoda:request_success_total", {"finished_reason": "abort"})
    call = stub.Generate(pb2.GenerateRequest(prompt="Once", max_tokens=2000, ignore_eos=True), metadata=AUTH)
    first = next(call)
    assert not first.finished
    call.cancel()
    deadline = time.time() + 10
    while time.time() < deadline and server.metric("pagoda:request_success_total", {"finished_reason": "abort"}) == before:
        time.sleep(0.1)
    assert server.metric("pagoda:request_success_total", {"finished_reason": "abort"}) == before + 1
    deadline = time.time() + 10  # the engine drops it at its next step
    while time.time() < deadline and server.metric("pagoda:num_requests_running") != 0:
        time.sleep(0.1)
    assert server.metric("pagoda:num_requests_running") == 0


def test_resource_exhausted_and_unavailable(pb):
    pb2, _ = pb
    port = free_port()
    s = Server(TINY_MODEL, "--max-model-len", 2048, "--grpc-port", port, "--rate-limit", "rps=1",
               "--shutdown-timeout", 5)
    try:
        stub = stub_for(pb, port)
        codes = []

        def one():
            try:
                list(stub.Generate(pb2.GenerateRequest(prompt="Once", max_tokens=2)))
                codes.append("ok")
            except grpc.RpcError as e:
                codes.append(e.code())

        threads = [threading.Thread(target=one) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        assert "ok" in codes and grpc.StatusCode.RESOURCE_EXHAUSTED in codes, codes
        time.sleep(1.1)
        # A long stream keeps the server draining while we probe it.
        call = stub.Generate(pb2.GenerateRequest(prompt="Once", max_tokens=2000, ignore_eos=True))
        next(call)
        s.terminate()
        time.sleep(0.3)
        assert stub.Health(pb2.HealthRequest()).status == pb2.HealthResponse.DRAINING
        with pytest.raises(grpc.RpcError) as e:
            list(stub.Generate(pb2.GenerateRequest(prompt="Once", max_tokens=2)))
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE
        rest = list(call)
        assert rest[-1].finished
        assert s.proc.wait(timeout=30) == 0
    finally:
        s.kill()


def test_generate_validates_stop_strings(pb, server):
    pb2, _ = pb
    stub = stub_for(pb, server.grpc_port)
    for stop, phrase in ([[""], "empty"], [["x"] * 17, "more than 16"], [["y" * 2000], "at most 1024"]):
        with pytest.raises(grpc.RpcError) as e:
            list(stub.Generate(pb2.GenerateRequest(prompt="Once", max_tokens=2, stop=stop), metadata=AUTH))
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT and phrase in e.value.details(), e.value.details()
    ok = list(stub.Generate(pb2.GenerateRequest(prompt="Once", max_tokens=2, stop=["zzz"]), metadata=AUTH))
    assert ok[-1].finished
