"""Imported last by the sub-env pool's fork server (envs/fork_server.py): its preloaded simulator
is then in the permanent generation of the collector (embodied_rl/heap.py), so each forked
sub-env's full collections skip it. The fork server's interface takes module names only, hence a
module whose import is the action."""
from embodied_rl import heap

heap.settle()
