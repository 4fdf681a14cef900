"""A C-core gRPC client (Python's grpcio) driving vmscoped, for tests/tests/grpcio.rs.

    grpcio_client.py SOCKET PID

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


def main():
    socket, pid = sys.argv[1], int(sys.argv[2])
    facts = {"grpcio": grpc.__version__}
    with grpc.insecure_channel("unix://" + socket) as channel:
        reflection = ProtoReflectionDescriptorDatabase(channel)
        facts["services"] = sorted(reflection.get_services())
        pool = descriptor_pool.DescriptorPool(reflection)
        profiler = pool.FindServiceByName("vmscope.v1.Profiler")
        facts["profiler_methods"] = sorted(m.name for m in profiler.methods)

        def message(name):
            return message_factory.GetMessageClass(pool.FindMessageTypeByName(name))

        def method(service, name, streaming=False):
            descriptor = pool.FindServiceByName(service).FindMethodByName(name)
            call = channel.unary_stream if streaming else channel.unary_unary
            return call(
                f"/{service}/{name}",
                request_serializer=lambda m: m.SerializeToString(),
                response_deserializer=message_factory.GetMessageClass(
                    descriptor.output_type
                ).FromString,
            )

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
