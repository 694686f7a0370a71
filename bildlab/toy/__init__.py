"""The toy world's models: `zoo` builds the shipped zoo (`_zoo`), `train` holds its training
functions, `card` measures it."""
