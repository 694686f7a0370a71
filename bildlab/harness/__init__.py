"""The harness that makes records: `evaluate` (sweeps, resumable, sharded), `shard` and
`distributed` (where a shard runs), `records` (a sweep's rows as registry records), `registry` (the
results on disk) and `columns` (how a record's examples are stored there), `calibrate` (what each
call costs on this machine), `pricing` (records priced by a calibration), `retime` (a registry timed
again here), `benchmark` (the quick comparison of the `bildlab demo` command), `batch_sizes` (the
methods against batched greedy at each batch size)."""
