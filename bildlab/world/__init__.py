"""The world the engine decodes in: `tasks` (the synthetic toy tasks and the paper's data sets),
`models` (the toy zoo's pairs and the paper's checkpoints, loaded as pairs), `mirror` (a local copy
of the hubs)."""
