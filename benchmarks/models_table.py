"""Write docs/models.md: the model table of tests/test_models.py, run on every architecture listed
there.

    python benchmarks/models_table.py            # a few minutes on one CPU core

Each architecture's tiny random model (and its one-layer copy as the small model) is decoded by
every method, by generate_batch and on a static cache on three prompts, with and without an EOS inside the output, and
compared with transformers' greedy generate: "exact" (all tokens equal) or "refused"
(bildlab.Unsupported before the first token). The test module checks that every line written here is
what the installed transformers gives."""

import os
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402
import transformers as tf  # noqa: E402
from test_models import ARCHITECTURES, CHEAP, CHECKS, DOC, ROUTES, outcomes, row  # noqa: E402

from bildlab.atomic import atomic_path  # noqa: E402

HEAD = """# Models

Which transformers architectures bildlab decodes exactly, by method: every method and `generate_batch` give
transformers' greedy `generate` tokens ("exact") or raise `bildlab.Unsupported` before the first token ("refused"),
with a message that names the model class, the method and the reason. Written by `{script}` from the model
table of `tests/test_models.py` (tiny random models, transformers {version}; the test checks every line). The rules
are in [decoding.md](decoding.md#which-models). The CI set: {cheap}; the others are marked `slow`.

Routes: `greedy`; `speculative` (k=3, the one-layer copy as draft); `bild` (fallback 0, rollback 0, N=3,
first-differing: lossless); `bild-first-above` (the paper's rule, the large model as its own draft: lossless); each also
through `generate_batch` ("batch ...") and through `generate` on a static cache ("static ...": refused where the model's
logits on a static cache differ from those on the dynamic cache, or its forward fails on one, or its cache holds
a recurrent state or a sliding window shorter than the static cache); every route but greedy keeps drafted tokens
somewhere. `lossy`: BiLD
first-above with fallback 0.3, rollback 1 and the one-layer draft, where no transformers reference exists: `generate`
against `generate_batch`.

A wider search, `benchmarks/models_sweep.py` (every causal-LM and seq2seq architecture that transformers 5.24.0
registers, from generic tiny config values, through the same checks before the static routes
existed), built and ran 129 of 234 model types: none gave
other tokens than transformers' greedy `generate` or failed other than by bildlab's refusal; 101 were exact on every
route, 28 had routes refused (BERT-like decoders built with `is_decoder=False` and FSMT, whose tokens fed at once
see the tokens after them; the token-derived decoder positions of M2M100, NLLB and SeamlessM4T, since fed in
pieces; recurrent states; no
cache argument; a forward that fails on bildlab's cache or on several tokens at once; Blenderbot's
`encoder_no_repeat_ngram_size`). The other 105 do not build from generic values (they
need values of their own) and are not covered by it.

| architecture | class | {routes} | lossy | why refused |
|{rules}
"""


def main() -> None:
    torch.set_num_threads(1)
    tf.logging.set_verbosity_error()
    lines = []
    for name in ARCHITECTURES:
        lines.append(row(name, outcomes(name)))
        print(lines[-1], flush=True)
    head = HEAD.format(
        script=Path(__file__).relative_to(ROOT),
        version=tf.__version__,
        cheap=", ".join(CHEAP),
        routes=" | ".join(ROUTES),
        rules="---|" * (len(ROUTES) + 4),
    )
    with atomic_path(DOC) as tmp:
        tmp.write_text(head + "\n".join(lines) + "\n\n[Back to decoding.md](decoding.md)\n")
    assert len(CHECKS) * 3 == len(ROUTES)


if __name__ == "__main__":
    main()
