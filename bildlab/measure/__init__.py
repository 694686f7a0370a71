"""Measurement: `metrics` (BLEU, ROUGE-L), `intervals` (95% paired-bootstrap intervals), `summary`
(a sweep's rows as a record's numbers), `mechanism` (what each method's counts say), `costs` (a
record's counts priced by a calibration of a machine)."""
