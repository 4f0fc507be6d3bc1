"""The application layer: what the commands compose (the pipeline of resolve, environments, probe runs and
receipts; surveys, baselines, fleets, shards, upstream's test layout). It takes one options object resolved at a
command's entry (``pipeline.Options``), never the parsed arguments, and imports no command."""
