"""What was observed and what it means: observations, receipts, bundles, and the judging rules.
Pure data and rules; never runs a tree."""
