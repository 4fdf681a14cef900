"""An OTLP profiles receiver for the tests, built from the OpenTelemetry project's own
generated messages and service (PyPI's opentelemetry-proto) on grpcio: nobody's code here but
this loop.

    otlp_receiver.py PORT_FILE OUT_FILE [--port N] [--delay SECONDS] [--keep NAME,...]

Serves ProfilesService/Export on 127.0.0.1 (port N, or one the kernel picks), writes the port
to PORT_FILE once serving, and appends one JSON line per request to OUT_FILE: each resource's
attributes and each sample with its frames (leaf first, as function names; a location's lines
innermost first), their `profile.frame.type` and `vmscope.code.range`, its value and
attributes, what the dictionary's zero entries hold, and the request's size encoded and
gzipped (as a gzip-compressing exporter sends it, near enough). With --delay, each export answers
after that many seconds (a slow collector). With --keep, only the resources whose
process.executable.name is listed are written out in full (the others by their attributes),
so that a busy host's windows cost the receiver little."""

import gzip
import json
import sys
import time
from concurrent import futures

import grpc
from opentelemetry.proto.collector.profiles.v1development import (
    profiles_service_pb2,
    profiles_service_pb2_grpc,
)


def any_value(value):
    kind = value.WhichOneof("value")
    return getattr(value, kind) if kind else None


class Receiver(profiles_service_pb2_grpc.ProfilesServiceServicer):
    def __init__(self, out, delay, keep):
        self.out = out
        self.delay = delay
        self.keep = keep

    def Export(self, request, context):
        if self.delay:
            time.sleep(self.delay)
        d = request.dictionary
        strings = d.string_table

        def attributes(indices):
            found = {}
            for i in indices:
                kv = d.attribute_table[i]
                found[strings[kv.key_strindex]] = any_value(kv.value)
            return found

        resources = []
        # The window's start (every profile of a window has it): a test knows from it which
        # windows have arrived.
        starts = [
            profile.time_unix_nano
            for rp in request.resource_profiles
            for sp in rp.scope_profiles
            for profile in sp.profiles
        ]
        for rp in request.resource_profiles:
            resource = {kv.key: any_value(kv.value) for kv in rp.resource.attributes}
            samples = []
            if self.keep and resource.get("process.executable.name") not in self.keep:
                resources.append({"resource": resource, "samples": samples})
                continue
            for sp in rp.scope_profiles:
                for profile in sp.profiles:
                    kinds = (
                        strings[profile.sample_type.type_strindex],
                        strings[profile.sample_type.unit_strindex],
                        strings[profile.period_type.type_strindex],
                        strings[profile.period_type.unit_strindex],
                    )
                    for sample in profile.samples:
                        frames = []
                        for loc_index in d.stack_table[sample.stack_index].location_indices:
                            location = d.location_table[loc_index]
                            attrs = attributes(location.attribute_indices)
                            for line in location.lines:
                                function = d.function_table[line.function_index]
                                frames.append(
                                    {
                                        "name": strings[function.name_strindex],
                                        "type": attrs.get("profile.frame.type"),
                                        "range": attrs.get("vmscope.code.range"),
                                        "line": line.line,
                                    }
                                )
                        samples.append(
                            {
                                "kinds": kinds,
                                "period": profile.period,
                                "value": list(sample.values),
                                "attributes": attributes(sample.attribute_indices),
                                "frames": frames,
                            }
                        )
            resources.append({"resource": resource, "samples": samples})
        zero = {
            "string": strings[0] if strings else None,
            "location": d.location_table[0].ByteSize() if d.location_table else None,
            "function": d.function_table[0].ByteSize() if d.function_table else None,
            "mapping": d.mapping_table[0].ByteSize() if d.mapping_table else None,
            "stack": d.stack_table[0].ByteSize() if d.stack_table else None,
            "attribute": d.attribute_table[0].ByteSize() if d.attribute_table else None,
            "link": d.link_table[0].ByteSize() if d.link_table else None,
        }
        encoded = request.SerializeToString()
        sizes = {"encoded": len(encoded), "gzipped": len(gzip.compress(encoded))}
        self.out.write(
            json.dumps(
                {
                    "resources": resources,
                    "start": min(starts) if starts else None,
                    "zero": zero,
                    "bytes": sizes,
                }
            ) + "\n"
        )
        self.out.flush()
        return profiles_service_pb2.ExportProfilesServiceResponse()


def main():
    port_file, out_file = sys.argv[1], sys.argv[2]
    port, delay, keep = 0, 0.0, set()
    args = sys.argv[3:]
    while args:
        flag, value, args = args[0], args[1], args[2:]
        if flag == "--port":
            port = int(value)
        elif flag == "--delay":
            delay = float(value)
        elif flag == "--keep":
            keep = set(value.split(","))
    out = open(out_file, "a")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    profiles_service_pb2_grpc.add_ProfilesServiceServicer_to_server(Receiver(out, delay, keep), server)
    bound = server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    with open(port_file + ".tmp", "w") as f:
        f.write(str(bound))
    import os

    os.rename(port_file + ".tmp", port_file)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
