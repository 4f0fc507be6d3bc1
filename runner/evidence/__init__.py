"""What was observed, kept and signed: receipts, bundles, compare, formats, attestations, the probe catalog
and the identities (the rules that judge are runner/judge). Never runs a tree."""
