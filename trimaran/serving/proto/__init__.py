"""The V2 gRPC protocol: our copy of the proto and the modules grpcio-tools generates from it."""
