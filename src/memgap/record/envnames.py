"""The environment variables memgap's bootstrap and children read, named once.

(The bootstrap's sitecustomize and the scenarios spell the first ones out: they
must not import memgap before they know it is wanted.)
"""
RECORD_DIR_ENV = "MEMGAP_RECORD_DIR"  # a recording folder: phase snapshots go there
TRIM_AFTER_ENV = "MEMGAP_TRIM_AFTER"  # a phase name: after recording it, trim once and record "after-trim"
TRIM_EVERY_ENV = "MEMGAP_TRIM_EVERY"  # seconds: a periodic malloc_trim(0)
TRIMMER_ENV = "MEMGAP_TRIMMER"        # "1": run memgap.Trimmer (trims when the process goes quiet)
EXIT_SOCKET_ENV = "MEMGAP_EXIT_SOCKET"  # memgap run's socket: the agent holds its process's exit for a last read
# "outside": a Python child's exits are read from outside through EXIT_SOCKET_ENV's hold too (memgap._hook)
EXIT_READS_ENV = "MEMGAP_EXIT_READS"
WALK_ENV = "MEMGAP_WALK"              # "0": phase snapshots skip the gc walk for large buffers
PYMALLOC_RELEASE_ENV = "MEMGAP_PYMALLOC_RELEASE"  # "1": trims also give back pymalloc's empty pools
ALLOCATOR_DIRS_ENV = "MEMGAP_ALLOCATOR_DIRS"  # folders (":"-separated) where the lab looks for allocators first
# "1": collections off in the parent, gc.freeze() before each fork, on in the child
GC_FREEZE_ENV = "MEMGAP_GC_FREEZE_AT_FORK"
# The phase the bootstrap records as the interpreter begins to shut down (memgap.record.idle reads it):
# named here so the child imports no more of memgap at its exit than it had (its exit snapshot counts it)
BEFORE_EXIT_PHASE = "before-exit"
# The longest a Python child's exit waits for the recorder's read from outside (memgap._hook), and so the
# longest a read at a held exit is waited for (memgap.record.exit_hold): longer than the agent's 1 s
# (EXIT_HOLD_MS), as a Python process is often the large one (a PyTorch CUDA process's read took 0.43-0.8 s
# on a 16-core machine)
EXIT_HOLD_SECONDS = 3.0
