"""The paper's tasks (IWSLT 2017 de-en, WMT14 de-en, XSum, CNN/DailyMail): Hugging Face data sets."""

import os

from .toy import cache_dir

PAPER_TASKS = ("iwslt2017-de-en", "wmt14-de-en", "xsum", "cnn_dailymail")

# name -> (hub path, config, row -> (source, target))
_PAPER_SOURCES = {
    "iwslt2017-de-en": ("iwslt2017", "iwslt2017-de-en", lambda r: (r["translation"]["de"], r["translation"]["en"])),
    # the hub's validation split of wmt14 de-en is newstest2013, its test split newstest2014
    "wmt14-de-en": ("wmt14", "de-en", lambda r: (r["translation"]["de"], r["translation"]["en"])),
    "xsum": ("EdinburghNLP/xsum", None, lambda r: (r["document"], r["summary"])),
    "cnn_dailymail": ("cnn_dailymail", "3.0.0", lambda r: (r["article"], r["highlights"])),
}


def _load_paper_task(name, split, limit, data_files):
    import datasets  # heavy import, only needed here

    path, config, row_to_pair = _PAPER_SOURCES[name]
    if data_files is None:
        ds = datasets.load_dataset(path, config, split=split)
    else:
        data_files = os.fspath(data_files)
        lower = data_files.lower()
        if lower.endswith((".jsonl", ".json")):
            builder = "json"
        elif lower.endswith(".csv"):
            builder = "csv"
        else:
            raise ValueError(f"data_files must end in .jsonl, .json or .csv; got {data_files!r}")
        if not os.path.isfile(data_files):
            raise FileNotFoundError(f"data_files: no such file {data_files!r}")
        ds = datasets.load_dataset(builder, data_files=data_files, split="train",
                                   cache_dir=os.path.join(cache_dir(), "hf"))
    if limit is not None:
        ds = ds.select(range(min(limit, len(ds))))
    examples = []
    for row in ds:
        source, target = row_to_pair(row)
        examples.append({"source": source, "target": target})
    return examples
