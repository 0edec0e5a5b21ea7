"""Builds the gpeserve client package: generates the gRPC stubs (gpeserve/v1/gpeserve_pb2*.py)
from the repository's proto/ with grpcio-tools, and requires at run time at least the grpcio and
protobuf versions those stubs were generated for (they check both when imported).

pip builds from the source tree (pip >= 21.3), so ../../proto is found; a copy of the package
folder without the repository around it cannot be built (there is no proto to generate from).
"""
import os
import re
import sys

from setuptools import setup

HERE = os.path.dirname(os.path.abspath(__file__))
PROTO_ROOT = os.path.normpath(os.path.join(HERE, "..", "..", "proto"))
PROTO = "gpeserve/v1/gpeserve.proto"
OUT = os.path.join(HERE, "gpeserve", "v1")


def generate():
    if not os.path.isfile(os.path.join(PROTO_ROOT, PROTO)):
        sys.exit(f"gpeserve client: {os.path.join(PROTO_ROOT, PROTO)} not found; install from "
                 "the repository (pip install ./client/python), which holds the proto")
    from grpc_tools import protoc
    import grpc_tools
    include = os.path.join(os.path.dirname(grpc_tools.__file__), "_proto")
    rc = protoc.main(["protoc", f"-I{PROTO_ROOT}", f"-I{include}", f"--python_out={HERE}",
                      f"--grpc_python_out={HERE}", os.path.join(PROTO_ROOT, PROTO)])
    if rc != 0:
        sys.exit(f"gpeserve client: protoc failed on {PROTO} (exit {rc})")
    with open(os.path.join(OUT, "__init__.py"), "w") as f:
        f.write('"""Generated from proto/gpeserve/v1/gpeserve.proto at build time."""\n')


def runtime_requirements():
    """The oldest grpcio and protobuf the generated stubs accept."""
    with open(os.path.join(OUT, "gpeserve_pb2_grpc.py")) as f:
        grpc_version = re.search(r"GRPC_GENERATED_VERSION = '([\d.]+)'", f.read())
    with open(os.path.join(OUT, "gpeserve_pb2.py")) as f:
        pb_version = re.search(
            r"ValidateProtobufRuntimeVersion\(\s*_runtime_version\.Domain\.PUBLIC,\s*(\d+),\s*"
            r"(\d+),\s*(\d+)", f.read())
    requirements = [f"grpcio>={grpc_version.group(1)}" if grpc_version else "grpcio"]
    if pb_version:
        major, minor, patch = (int(v) for v in pb_version.groups())
        # The stubs' runtime check accepts the same major version, same or newer.
        requirements.append(f"protobuf>={major}.{minor}.{patch},<{major + 1}")
    else:
        requirements.append("protobuf")
    return requirements


generate()
setup(install_requires=runtime_requirements())
