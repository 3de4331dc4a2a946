"""KEDA's external scaler protocol and the stubs generated from it.

``externalscaler.proto`` is copied verbatim from kedacore/keda (Apache License 2.0),
``pkg/scalers/externalscaler/externalscaler.proto`` at commit 125494be45e8ea3ba1bd734a697e4a5bcd397197;
see NOTICE. The ``externalscaler_pb2*`` modules are generated from it with grpcio-tools, from the
repository root::

    python -m grpc_tools.protoc -I . --python_out=. --pyi_out=. --grpc_python_out=. \\
        recommender/serve/proto/externalscaler.proto

``tests/test_serve_proto.py`` regenerates them and fails when the committed copies drift.
"""
