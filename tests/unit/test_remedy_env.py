"""The environment the remedies set, worked out without a process: what the user set is kept, and the
one LD_PRELOAD rule (a library in front, once). Remedies on real processes and real allocators:
tests/live/test_remedies.py."""
from memgap.allocators.catalog import preloaded
from memgap.remedies import spawn_env


def test_spawn_env_keeps_what_the_user_set():
    env = spawn_env({"MALLOC_ARENA_MAX": "4", "PATH": "/bin"}, MALLOC_ARENA_MAX="2", MALLOC_TRIM_THRESHOLD_="65536")
    assert env == {"MALLOC_ARENA_MAX": "4", "PATH": "/bin", "MALLOC_TRIM_THRESHOLD_": "65536"}


def test_a_library_goes_in_front_of_ld_preload_once():
    assert preloaded("/l/je.so") == "/l/je.so"                                   # nothing there before
    assert preloaded("/l/je.so", "/u/b.so") == "/l/je.so /u/b.so"                # the user's kept, after it
    assert preloaded("/l/je.so", "/u/b.so /l/je.so") == "/l/je.so /u/b.so"       # once, in front
    assert preloaded("/l/je.so", "/u/b.so:/l/je.so  /u/c.so") == "/l/je.so /u/b.so /u/c.so"  # ld.so's colons
