"""The synthetic incident model: a state machine written for diffprobe (not SGLang code) and the
receipts it yields. Not tree evidence and not a command: it sits above evidence and the sandbox
(it makes receipts) and below the commands (``diffprobe model`` parses and prints)."""
