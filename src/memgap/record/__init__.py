"""Record: ``memgap run`` and its recording.

``recorder`` starts the command and samples its process tree; ``assemble`` makes the recording
folder into a run document (``load_run``); ``recording`` writes that folder (private, append-only,
one JSON object per line); ``tree_watch`` reads every process of the tree from outside;
``tree_end`` and ``watchdog`` end the tree when memgap is told to stop or is killed; ``marks``,
``idle`` and ``tree_idle`` find the phases and the idle of programs that mark nothing; ``load``
drives a service with the user's load tool; ``envnames`` names the variables children read.
"""
