"""The engine: decoding over unmodified Hugging Face models, everything a `pip install` user needs
and nothing else of bildlab. `decoding` is the loop (greedy, sampling, speculative decoding, BiLD,
prompt lookup), `batch` the same outputs for many inputs at once, `views` and `static` the caches it
decodes on (`static`: compiled steps), `lookup` prompt lookup's drafts, `early_exit` a draft made of
the large model's bottom layers, `capabilities` what cannot be exact for a model (refused before the
first token), `memory` what a batch needs, `timing` the one timing protocol."""
