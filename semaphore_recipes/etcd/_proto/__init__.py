"""Generated etcd v3 gRPC modules (see etcd_api.proto and scripts/gen-etcd-proto)."""
