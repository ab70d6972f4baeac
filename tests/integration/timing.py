"""Group timings of the integration tests' in-process workers."""

#: The session timeout of a worker in a test where no member has to expire (no
#: kill, freeze or take-over inside it). A short one (3 s) let a loop stall on the
#: loaded, shared CI machine evict a worker in the middle of a test: a rebalance
#: the test did not ask for, and a flake. Nothing waits for it: a worker that stops
#: leaves the group at once (LeaveGroup), and a member that joins triggers the
#: rebalance itself.
LONG_SESSION_MS = 30_000
