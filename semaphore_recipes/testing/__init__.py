"""Test helpers: real ZooKeeper servers and fault-injecting proxies."""
