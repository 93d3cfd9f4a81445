"""An OTLP/HTTP trace receiver for the gateway's trace test
(crates/cli/tests/it/serve_traces.rs, issue 48).

It decodes what arrives with the official protobuf definitions
(`opentelemetry-proto` from PyPI, in .ci/venv) and writes one JSON line
per span to the file named by its first argument. It listens on a free
loopback port and prints that port on its first line of output.
"""

import json
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (
    ExportTraceServiceRequest,
    ExportTraceServiceResponse,
)

OUT = open(sys.argv[1], "a", encoding="utf-8")


def value(v):
    kind = v.WhichOneof("value")
    if kind is None:
        return None
    if kind == "array_value":
        return [value(x) for x in v.array_value.values]
    if kind == "kvlist_value":
        return {kv.key: value(kv.value) for kv in v.kvlist_value.values}
    if kind == "bytes_value":
        return v.bytes_value.hex()
    return getattr(v, kind)


def attrs(kvs):
    return {kv.key: value(kv.value) for kv in kvs}


class Handler(BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        ok = self.path == "/v1/traces" and self.headers.get(
            "Content-Type", ""
        ).startswith("application/x-protobuf")
        if ok:
            req = ExportTraceServiceRequest()
            req.ParseFromString(body)
            for rs in req.resource_spans:
                resource = attrs(rs.resource.attributes)
                for ss in rs.scope_spans:
                    for sp in ss.spans:
                        OUT.write(
                            json.dumps(
                                {
                                    "name": sp.name,
                                    "trace_id": sp.trace_id.hex(),
                                    "span_id": sp.span_id.hex(),
                                    "parent_span_id": sp.parent_span_id.hex(),
                                    "scope": ss.scope.name,
                                    "resource": resource,
                                    "attributes": attrs(sp.attributes),
                                    "events": [
                                        {"name": e.name, "attributes": attrs(e.attributes)}
                                        for e in sp.events
                                    ],
                                    "status": sp.status.code,
                                }
                            )
                            + "\n"
                        )
            OUT.flush()
        resp = ExportTraceServiceResponse().SerializeToString() if ok else b""
        self.send_response(200 if ok else 400)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", str(len(resp)))
        self.end_headers()
        self.wfile.write(resp)

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_address[1], flush=True)
server.serve_forever()
