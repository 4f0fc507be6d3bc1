"""The judge: every rule from what a case's effects show to a duty held or failed, a case's
classification, a site's, a fix's and a differential's status. Pure: it imports nothing of runner
outside this package (no storage, format, signing or command code), only the probes' own duty
tables, case spaces and coverage reading (standard library). Its import closure is its identity
(``runner.evidence.catalog.judge``), so code outside it never moves a receipt's judge.
"""
