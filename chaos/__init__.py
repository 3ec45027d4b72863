"""The project's own fault campaign (Jepsen-style): a runner that drives client
processes against a 3-member ZooKeeper ensemble or etcd cluster under a seeded nemesis,
and a checker that replays the store's own history. See docs/reliability.md."""
