"""A C-core gRPC client (Python's grpcio) driving vmscoped, for tests/tests/grpcio.rs.

    grpcio_client.py SOCKET PID
    grpcio_client.py heap SOCKET JVM_PID   (tests/tests/heap.rs: a heap histogram, kept and got)
    grpcio_client.py query SOCKET VM_PID   (tests/tests/heap_vm.rs: a structure query)

The channel has no options: grpcio sends the socket path, percent-encoded, as :authority, as
every gRPC C-core client (Python, Ruby, C++, PHP) does over a Unix socket. Nothing here knows
the project's .proto files: services and messages come from the daemon's server reflection.

Prints one JSON object of facts for the Rust test to check. A failed call raises: the traceback
names the call and its status.
"""

import datetime
import json
import sys

import grpc
from google.protobuf import descriptor_pool, message_factory
from grpc_reflection.v1alpha.proto_reflection_descriptor_database import (
    ProtoReflectionDescriptorDatabase,
)


class Api:
    """The daemon's services and messages, as its server reflection describes them."""

    def __init__(self, channel):
        self.channel = channel
        self.reflection = ProtoReflectionDescriptorDatabase(channel)
        self.pool = descriptor_pool.DescriptorPool(self.reflection)

    def message(self, name):
        return message_factory.GetMessageClass(self.pool.FindMessageTypeByName(name))

    def method(self, service, name, streaming=False):
        descriptor = self.pool.FindServiceByName(service).FindMethodByName(name)
        call = self.channel.unary_stream if streaming else self.channel.unary_unary
        return call(
            f"/{service}/{name}",
            request_serializer=lambda m: m.SerializeToString(),
            response_deserializer=message_factory.GetMessageClass(
                descriptor.output_type
            ).FromString,
        )


def heap(socket, pid):
    """Takes a heap histogram of JVM `pid`, gets it back by its id, and prints what both say."""
    with grpc.insecure_channel("unix://" + socket) as channel:
        api = Api(channel)
        take = api.method("vmscope.v1.Profiler", "TakeHeapHistogram")
        taken = take(api.message("vmscope.v1.TakeHeapHistogramRequest")(pid=pid), timeout=60)
        get = api.method("vmscope.v1.Profiler", "GetHeapHistogram")
        got = get(api.message("vmscope.v1.GetHeapHistogramRequest")(id=taken.id), timeout=10)
        facts = {
            "id": taken.id,
            "same": taken == got,
            "live": taken.live,
            "pause_seconds": taken.pause.ToTimedelta().total_seconds(),
            "classes": {c.name: [c.instances, c.bytes] for c in taken.classes},
            "total_instances": taken.total_instances,
        }
    print(json.dumps(facts))


def query(socket, pid):
    """Asks VM `pid` for its Node structures, one per global, and prints them."""
    with grpc.insecure_channel("unix://" + socket) as channel:
        api = Api(channel)
        ask = api.method("vmscope.v1.Profiler", "QueryHeap")
        request = api.message("vmscope.v1.QueryHeapRequest")(pid=pid)
        request.query.globals.SetInParent()
        request.query.member.classes.append("Node")
        request.query.per_root = True
        answer = ask(request, timeout=60)
        facts = {
            "runtime": answer.runtime,
            "live": answer.live,
            "structures": [[s.root, s.objects, s.bytes] for s in answer.structures],
        }
    print(json.dumps(facts))


def main():
    if sys.argv[1] == "heap":
        return heap(sys.argv[2], int(sys.argv[3]))
    if sys.argv[1] == "query":
        return query(sys.argv[2], int(sys.argv[3]))
    socket, pid = sys.argv[1], int(sys.argv[2])
    facts = {"grpcio": grpc.__version__}
    with grpc.insecure_channel("unix://" + socket) as channel:
        api = Api(channel)
        message, method = api.message, api.method
        facts["services"] = sorted(api.reflection.get_services())
        profiler = api.pool.FindServiceByName("vmscope.v1.Profiler")
        facts["profiler_methods"] = sorted(m.name for m in profiler.methods)

        check = method("grpc.health.v1.Health", "Check")
        response = check(message("grpc.health.v1.HealthCheckRequest")(service=""), timeout=10)
        facts["health"] = response.DESCRIPTOR.fields_by_name["status"].enum_type.values_by_number[
            response.status
        ].name

        start = method("vmscope.v1.Profiler", "StartSession")
        session = start(
            message("vmscope.v1.StartSessionRequest")(
                pids=[pid], duration=datetime.timedelta(seconds=2)
            ),
            timeout=10,
        )
        facts["session_id"] = session.id

        watch = method("vmscope.v1.Profiler", "WatchSession", streaming=True)
        snapshots = []
        for profile in watch(
            message("vmscope.v1.WatchSessionRequest")(
                session_id=session.id, interval=datetime.timedelta(milliseconds=200)
            ),
            timeout=30,
        ):
            snapshots.append({"samples": profile.total_samples, "complete": profile.complete})
        facts["watch"] = snapshots

        get = method("vmscope.v1.Profiler", "GetProfile")
        profile = get(message("vmscope.v1.GetProfileRequest")(session_id=session.id), timeout=10)
        facts["profile"] = {
            "complete": profile.complete,
            "total_samples": profile.total_samples,
            "rows": {row.name: row.samples for row in profile.rows},
        }
    print(json.dumps(facts))


if __name__ == "__main__":
    main()
