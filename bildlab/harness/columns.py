"""How a record's examples are stored: rows as columns, and columns packed to compact text.

`columns(rows, fields)` turns per-example rows into {field: [value per row]} (a field of dicts with
the same keys, e.g. stats, into columns in turn); `pack` writes a column of booleans, small integers
or seconds compactly; `unpack` and `rows` invert them exactly. The registry stores every record's
examples this way."""


def columns(rows: list[dict], fields: list[str]) -> dict:
    """Rows as columns, {field: [value per row]}; a field whose rows hold dicts with the same keys
    (stats) as {"columns": {key: [value per row that has one]}} in turn, with "has": a string of 1
    and 0 where some rows have none (None, e.g. the examples a timed sample left out)."""
    out = {}
    for f in fields:
        values = [r[f] for r in rows]
        dicts = [v for v in values if v is not None]
        first = dicts[0] if dicts else None
        if (
            isinstance(first, dict)
            and first
            and all(isinstance(v, dict) and list(v) == list(first) for v in dicts)
        ):
            out[f] = {"columns": {k: [v[k] for v in dicts] for k in first}}
            if len(dicts) < len(values):
                out[f]["has"] = "".join("0" if v is None else "1" for v in values)
        else:
            out[f] = values
    return out


def rows(n: int, fields: list[str], columns: dict) -> list[dict]:
    """The inverse of `columns`."""
    cols = {}
    for f, c in columns.items():
        if isinstance(c, dict):
            dicts = iter([dict(zip(c["columns"], vals)) for vals in zip(*c["columns"].values())])
            c = [next(dicts) if has == "1" else None for has in c.get("has", "1" * n)]
        cols[f] = c
    if any(len(c) != n for c in cols.values()):
        raise ValueError("a column has another length than the examples")
    return [{f: cols[f][i] for f in fields} for i in range(n)]


def pack(columns: dict) -> dict:
    """Columns as stored: a column of booleans (None allowed) as one string of 1, 0 and -, one of
    integers 0-9 (the machine index; None allowed) as a string of digits and -, one of seconds (a
    field named ...seconds) as whole nanoseconds ({"ns": [...]}; the harness keeps seconds to the
    nanosecond, `timing.ns`); the rest as they are. Stats columns in turn."""
    out = {}
    for f, c in columns.items():
        if isinstance(c, dict) and "columns" in c:
            out[f] = {**c, "columns": pack(c["columns"])}
        elif not isinstance(c, list) or all(v is None for v in c):
            out[f] = c
        elif f.endswith("seconds") and all(v is None or type(v) is float for v in c):
            out[f] = {"ns": [None if v is None else round(v * 1e9) for v in c]}
        elif all(v is None or isinstance(v, bool) for v in c):
            out[f] = {"bools": "".join("-" if v is None else "1" if v else "0" for v in c)}
        elif all(v is None or (type(v) is int and 0 <= v <= 9) for v in c):
            out[f] = {"digits": "".join("-" if v is None else str(v) for v in c)}
        else:
            out[f] = c
    return out


def unpack(columns: dict) -> dict:
    """The inverse of `pack` (a record written before it was: its columns as they are)."""
    out = {}
    for f, c in columns.items():
        if isinstance(c, dict) and "columns" in c:
            out[f] = {**c, "columns": unpack(c["columns"])}
        elif isinstance(c, dict) and "ns" in c:
            out[f] = [None if v is None else v / 1e9 for v in c["ns"]]
        elif isinstance(c, dict) and "bools" in c:
            out[f] = [None if ch == "-" else ch == "1" for ch in c["bools"]]
        elif isinstance(c, dict) and "digits" in c:
            out[f] = [None if ch == "-" else int(ch) for ch in c["digits"]]
        else:
            out[f] = c
    return out
