"""One module per ``diffprobe`` command, and the pipeline they compose (resolve, build, probe)."""
