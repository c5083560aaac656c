"""Text kept in records (JSON Lines, JSON, CSV/TSV, Parquet, Arrow): each record's field(s) one document,
read once, streaming, into a plain-text extract in the cache joined by data.doc_separator, so a record
file gives exactly the ids of the text file that holds the same documents."""

from __future__ import annotations

import contextlib
import csv
import difflib
import hashlib
import io
import json
import os
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from minigpt.data.encoding import ProgressFactory
from minigpt.data.sources import SourceFile, shown
from minigpt.errors import UserError, first_line
from minigpt.io.atomic import atomic_open

EXTRACT_VERSION = 1
EXTENSIONS = {
    ".jsonl": "jsonl",
    ".ndjson": "jsonl",
    ".json": "json",
    ".csv": "csv",
    ".tsv": "tsv",
    ".parquet": "parquet",
    ".arrow": "arrow",
}
ARROW_EXTRA = "pip install 'minigpt[parquet]' (or uv sync --extra parquet)"
JSON_READ = 1 << 20  # characters of a JSON array read at a time
_SURROGATE = re.compile("[\ud800-\udfff]")  # a JSON escape that is no character: UTF-8 cannot hold it
JSONL_BATCH = 1 << 20  # bytes of lines parsed as one JSON array: one call into the C parser for
# many records, faster than a call per line (benchmark `scripts/bench.py data --only jsonl`)
SNIFFED = ("jsonl", "json", "csv", "tsv")  # the text formats a file found in a folder may only look like


def file_format(path: str, setting: str) -> str | None:
    """The record format of a file (by extension under data.format auto), or None for plain text."""
    if setting == "text":
        return None
    if setting != "auto":
        return setting
    return EXTENSIONS.get(os.path.splitext(path)[1].lower())


@dataclass(frozen=True)
class RecordRules:
    """A record's fields joined by `field_separator` make a document; a bad one is an error, or skipped (`skip_bad`)."""

    fields: tuple[str, ...]
    field_separator: str
    skip_bad: bool

    @classmethod
    def of(cls, data: Any) -> RecordRules:
        """From a DataConfig (or anything with its text_field, field_separator, skip_bad_records)."""
        field = data.text_field
        return cls((field,) if isinstance(field, str) else tuple(field), data.field_separator, data.skip_bad_records)

    def key(self) -> list:
        return [list(self.fields), self.field_separator, self.skip_bad]

    def text(self, record: Any, where: str) -> str | None:
        """The record's document, or None for a bad record that is to be skipped."""
        if not isinstance(record, dict):
            raise UserError(f'{where} is {_json_kind(record)}, not a record with fields ({{"text": ...}})')
        parts = []
        for name in self.fields:
            if name not in record:
                if self.skip_bad:
                    return None
                raise UserError(f"{where} has no field '{name}' ({_fields_hint(name, list(record))})")
            value = record[name]
            if not isinstance(value, str) or _SURROGATE.search(value):
                if self.skip_bad:
                    return None
                kind = _json_kind(value) if not isinstance(value, str) else "a string with a lone surrogate (\\ud800)"
                raise UserError(
                    f"{where}: field '{name}' is {kind}, not text; fix the record, or set "
                    "data.skip_bad_records: true to skip such records"
                )
            parts.append(value)
        return self.field_separator.join(parts)


def _json_kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return f"a boolean ({str(value).lower()})"
    if isinstance(value, (int, float)):
        return f"a number ({value})"
    if isinstance(value, str):
        return "a string"
    return "a list" if isinstance(value, list) else f"a {type(value).__name__}"


def _fields_hint(name: str, have: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, [str(h) for h in have], n=1, cutoff=0.5)
    hint = f"it has: {shown([str(h) for h in have], 12)}" if have else "it has no fields"
    return hint + (f"; did you mean data.text_field={close[0]}?" if close else "; set data.text_field to one of them")


# ---- readers: (where, record, how far through the file the record starts, 0..1) -------------


def _jsonl(path: str, size: int) -> Iterator[tuple[str, Any, float]]:
    with open(path, "rb") as f:
        number, offset = 0, 0
        while lines := f.readlines(JSONL_BATCH):
            kept = []  # (line number, where it starts, its bytes), blank lines left out
            for line in lines:
                number += 1
                if line.strip():
                    kept.append((number, offset, line))
                offset += len(line)
            for (n, start, _), record in zip(kept, _parse_lines(path, kept)):
                yield f"{path}, line {n}", record, start / max(size, 1)


def _parse_lines(path: str, kept: list[tuple[int, int, bytes]]) -> list[Any]:
    """Each line's JSON value: all at once as one array, or, when that fails or gives another
    count (a line that is not one JSON value), line by line to name the line at fault."""
    with contextlib.suppress(json.JSONDecodeError, UnicodeDecodeError):
        values = json.loads(b"[" + b",".join(line for _, _, line in kept) + b"]")
        if len(values) == len(kept):
            return values
    values = []
    for number, _, line in kept:
        try:
            values.append(json.loads(line))
        except UnicodeDecodeError as e:
            raise UserError(f"{path}, line {number}: not UTF-8 text ({e.reason})") from None
        except json.JSONDecodeError as e:
            raise UserError(f"{path}, line {number} is not JSON ({e.msg} at column {e.colno})") from None
    return values


def _json_array(path: str, size: int) -> Iterator[tuple[str, Any, float]]:
    """The elements of a top-level JSON array, decoded one at a time from a sliding buffer."""
    decoder = json.JSONDecoder()
    with open(path, encoding="utf-8", errors="strict") as f:
        buf, pos, consumed, done = "", 0, 0, False

        def more() -> bool:
            nonlocal buf, pos, consumed, done
            try:
                chunk = f.read(JSON_READ)
            except UnicodeDecodeError as e:
                raise UserError(f"{path} is not UTF-8 text ({e.reason})") from None
            done = not chunk
            consumed += pos
            buf, pos = buf[pos:] + chunk, 0
            return not done

        def skip_space() -> None:
            nonlocal pos
            while True:
                while pos < len(buf) and buf[pos] in " \t\r\n":
                    pos += 1
                if pos < len(buf) or not more():
                    return

        skip_space()
        if pos >= len(buf) or buf[pos] != "[":
            raise UserError(
                f'{path} is not a JSON array of records ([{{"text": ...}}, ...]); for one record per '
                "line name it .jsonl"
            )
        pos += 1
        number = 0
        while True:
            skip_space()
            if pos < len(buf) and buf[pos] == "]":
                return
            if number:
                if pos >= len(buf) or buf[pos] != ",":
                    raise UserError(
                        f"{path}: expected ',' or ']' after record {number} (the array is cut short or malformed)"
                    )
                pos += 1
                skip_space()
            number += 1
            while True:
                try:
                    record, end = decoder.raw_decode(buf, pos)
                    if end < len(buf) or done:
                        break
                except json.JSONDecodeError as e:
                    if done:
                        raise UserError(f"{path}: record {number} is not JSON ({e.msg})") from None
                if not more():
                    continue
            # the record's place: characters before it, a close enough share of the file's bytes
            yield f"{path}, record {number}", record, (consumed + pos) / max(size, 1)
            pos = end


def _csv(path: str, size: int, delimiter: str) -> Iterator[tuple[str, Any, float]]:
    csv.field_size_limit(2**31 - 1)  # a field is a document: often longer than csv's 128 KB default
    with open(path, "rb", buffering=0) as raw:  # unbuffered: its tell() is how far the CSV reader has read
        text = io.TextIOWrapper(io.BufferedReader(raw), encoding="utf-8", newline="")
        reader = csv.reader(text, delimiter=delimiter, strict=True)
        line = 0
        try:
            header = next(reader, None)
            if header is None:
                return
            for row in reader:
                start, line = line + 1, reader.line_num
                if len(row) != len(header):
                    if not row:
                        continue  # a blank line
                    raise UserError(
                        f"{path}, line {start}: {len(row)} fields where the header has {len(header)} "
                        f"({', '.join(header[:8])}); a field holding the delimiter needs quotes"
                    )
                yield f"{path}, line {start}", dict(zip(header, row)), raw.tell() / max(size, 1)
        except csv.Error as e:
            raise UserError(f"{path}, line {reader.line_num}: {e} (an unterminated quote?)") from None
        except UnicodeDecodeError as e:
            raise UserError(f"{path}: not UTF-8 text ({e.reason}); save it as UTF-8") from None


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.ipc
        import pyarrow.parquet
    except ImportError:
        raise UserError(f"reading Parquet and Arrow files needs pyarrow: {ARROW_EXTRA}") from None
    return pyarrow


def _arrow_batches(path: str, fmt: str, fields: Sequence[str]) -> tuple[Any, Iterator[tuple[Any, float, float]]]:
    """The schema of a Parquet file or an Arrow file or stream (datasets writes streams), and its
    record batches of the wanted columns, each with where it starts and ends in the file (0..1)."""
    pa = _pyarrow()
    try:
        if fmt == "parquet":
            pf = pa.parquet.ParquetFile(path)
            wanted = [f for f in fields if f in pf.schema_arrow.names]
            rows = max(pf.metadata.num_rows, 1)
            return pf.schema_arrow, _by_rows(pf.iter_batches(batch_size=4096, columns=wanted), rows)
        source = pa.memory_map(path)
        try:
            reader = pa.ipc.open_file(source)
            batches = [reader.get_batch(i) for i in range(reader.num_record_batches)]  # mapped, not read
            return reader.schema, _by_rows(iter(batches), max(sum(b.num_rows for b in batches), 1))
        except pa.ArrowInvalid:
            source.seek(0)
            stream = pa.ipc.open_stream(source)
            return stream.schema, _stream_batches(stream, source, max(source.size(), 1))
    except (pa.ArrowInvalid, OSError) as e:
        raise UserError(f"{path} is not a readable {fmt.capitalize()} file ({e})") from None


def _by_rows(batches: Iterator[Any], rows: int) -> Iterator[tuple[Any, float, float]]:
    done = 0
    for batch in batches:
        yield batch, done / rows, (done + batch.num_rows) / rows
        done += batch.num_rows


def _stream_batches(stream: Any, source: Any, size: int) -> Iterator[tuple[Any, float, float]]:
    while True:
        start = source.tell()
        try:
            batch = stream.read_next_batch()
        except StopIteration:
            return
        yield batch, start / size, source.tell() / size


def _arrow(path: str, fmt: str, rules: RecordRules) -> Iterator[tuple[str, Any, float]]:
    pa = _pyarrow()
    schema, batches = _arrow_batches(path, fmt, rules.fields)
    text_types = (pa.types.is_string, pa.types.is_large_string, getattr(pa.types, "is_string_view", None))
    for name in rules.fields:
        if name not in schema.names:
            raise UserError(f"{path} has no column '{name}' ({_fields_hint(name, schema.names)})")
        typ = schema.field(name).type
        if not any(test(typ) for test in text_types if test):  # is_string_view: pyarrow 16 and later
            raise UserError(f"{path}: column '{name}' holds {typ}, not strings; set data.text_field to a text column")
    row = 0
    try:
        for batch, start, end in batches:  # a damaged batch past the first fails here, when it is read
            columns = {}
            for name in rules.fields:  # offsets and UTF-8 checked first: damaged offsets would crash pyarrow
                column = batch.column(batch.schema.get_field_index(name))
                column.validate(full=True)
                columns[name] = column.to_pylist()
            n = batch.num_rows
            for i in range(n):
                row += 1
                yield (
                    f"{path}, row {row}",
                    {name: columns[name][i] for name in rules.fields},
                    start + (end - start) * i / n,
                )
    except (pa.ArrowException, OSError, UnicodeDecodeError) as e:
        what = f"not a readable {fmt.capitalize()} file"
        raise UserError(f"{path} is damaged after row {row}: {what} ({first_line(e)})") from None


def records(path: str, fmt: str, rules: RecordRules) -> Iterator[tuple[str, Any, float]]:
    """The records of one file, in order, each with where it is (for messages) and its place."""
    size = os.path.getsize(path)
    if fmt == "jsonl":
        return _jsonl(path, size)
    if fmt == "json":
        return _json_array(path, size)
    if fmt in ("csv", "tsv"):
        return _csv(path, size, "," if fmt == "csv" else "\t")
    return _arrow(path, fmt, rules)


def documents(path: str, fmt: str, rules: RecordRules) -> Iterator[tuple[str | None, float]]:
    """Each record's document (None for a skipped bad record) and its place in the file."""
    for where, record, place in records(path, fmt, rules):
        yield rules.text(record, where), place


def joined_text(path: str, fmt: str, rules: RecordRules, separator: str) -> str:
    """A record file's documents joined by `separator`, in memory (for scoring one file)."""
    texts = [t for t, _ in documents(path, fmt, rules) if t is not None]
    if not texts:
        raise UserError(f"{path} holds no records with text in field {', '.join(rules.fields)}")
    return separator.join(texts)


@dataclass(frozen=True)
class Extract:
    """A record file's documents as plain text: training, and with a split the records of its last `val_share`."""

    train: Path
    val: Path | None
    records: int
    skipped: int
    val_records: int = 0


def extract(
    path: str,
    sha256: str,
    fmt: str,
    rules: RecordRules,
    doc_separator: str,
    folder: Path,
    val_share: float | None,
    progress: ProgressFactory | None = None,
) -> Extract:
    """The file's extract from `folder`, written there first (atomically) if it is not."""
    settings = [EXTRACT_VERSION, sha256, fmt, rules.key(), doc_separator, val_share]
    key = hashlib.sha256(json.dumps(settings).encode("utf-8")).hexdigest()[:40]
    train, val, meta_path = folder / f"{key}.txt", folder / f"{key}.val.txt", folder / f"{key}.json"
    with contextlib.suppress(OSError, ValueError, KeyError):
        meta = json.loads(meta_path.read_text(encoding="utf-8"))
        if train.exists() and (val_share is None or val.exists()):
            held_out = meta.get("val_records", 0)
            return Extract(train, val if val_share is not None else None, meta["records"], meta["skipped"], held_out)
    folder.mkdir(parents=True, exist_ok=True)
    sep = doc_separator.encode("utf-8")
    counts = [0, 0, 0]  # train records, val records, skipped
    outs: list[IO[bytes]] = []

    def put(part: int, text: bytes) -> None:
        if counts[part]:
            outs[part].write(sep)
        outs[part].write(text)
        counts[part] += 1

    maybe_val = atomic_open(val, fsync=False) if val_share is not None else contextlib.nullcontext()
    with atomic_open(train, fsync=False) as out_train, maybe_val as out_val:
        outs += [out_train, out_val] if out_val is not None else [out_train]
        held = None  # the last training record, held back: without a record past the share, it is validation
        size, done = os.path.getsize(path), 0
        bar = progress(size, f"reading the records of {path}") if progress else None
        for text, place in documents(path, fmt, rules):
            if bar is not None and (now := int(place * size)) - done >= 1 << 20:
                bar.update(now - done)
                done = now
            if text is None:
                counts[2] += 1
                continue
            if out_val is None:
                put(0, text.encode("utf-8"))
                continue
            if held is not None:
                put(0, held)
                held = None
            if place >= 1 - val_share:
                put(1, text.encode("utf-8"))
            else:
                held = text.encode("utf-8")
        if held is not None:
            put(1 if counts[0] else 0, held)
        if bar is not None:
            bar.update(size - done)
            bar.close()
        if not counts[0] + counts[1]:
            skipped = f" ({counts[2]} skipped as bad)" if counts[2] else ""
            raise UserError(
                f"{path} holds no {fmt} records with text in field {' and '.join(rules.fields)}{skipped}; "
                "give it some records"
            )
        if val_share is not None and (not counts[0] or not counts[1]):
            raise UserError(
                f"{path} has {counts[0] + counts[1]} record(s): validation takes whole records from its end, which "
                "leaves no records for one side; add records, or set data.val_path to a validation file"
            )
    with atomic_open(meta_path, fsync=False) as f:
        meta = {"records": counts[0] + counts[1], "skipped": counts[2], "val_records": counts[1]}
        f.write(json.dumps(meta).encode("utf-8"))
    return Extract(train, val if val_share is not None else None, counts[0] + counts[1], counts[2], counts[1])


def text_files(
    files: Sequence[SourceFile],
    n_train: int | None,
    data: Any,
    sha256: Callable[[SourceFile], str],
    folder: Path,
    split_last: bool,
    progress: ProgressFactory | None = None,
) -> tuple[list[SourceFile], int | None]:
    """The documents with each record file replaced by its extract (`data` is a DataConfig). With
    `split_last` (no whole-file validation split) validation is the last records of the last file,
    about data.val_fraction of the corpus's bytes: whole records, where a text's tail would cut one."""
    rules, out, as_text = RecordRules.of(data), [], []
    for i, f in enumerate(files):
        fmt = file_format(f.path, data.format)
        if fmt in SNIFFED and f.found != "named" and data.format == "auto" and not holds_records(f.path, fmt, rules):
            as_text.append(f.name)
            fmt = None
        if fmt is None:
            out.append(f)
            continue
        last = split_last and i == len(files) - 1  # the file whose last records are validation
        share = min(1.0, data.val_fraction * sum(x.size for x in files) / max(f.size, 1)) if last else None
        try:
            ex = extract(f.path, sha256(f), fmt, rules, data.doc_separator, folder, share, progress)
        except OSError as e:
            raise UserError(
                f"cannot write the text of {f.path} to {folder} ({e.strerror}); set data.cache_dir"
            ) from None
        if ex.skipped:
            print(
                f"warning: {f.path}: skipped {ex.skipped} of {ex.skipped + ex.records} records whose field is missing "
                "or not text (data.skip_bad_records)",
                file=sys.stderr,
            )
        out.append(_source(ex.train, f.name, ex.records - ex.val_records))
        if ex.val is not None:
            out.append(_source(ex.val, f"{f.name} (validation records)", max(ex.val_records, 1)))
            n_train = len(out) - 1
    if as_text:
        exts = "/".join(sorted({os.path.splitext(n)[1].lower() for n in as_text}))
        fields = " and ".join(f"'{name}'" for name in rules.fields)
        print(
            f"note: {len(as_text)} {exts} file(s) in the tree were read as text: they hold no records with the "
            f"field {fields} ({shown(as_text)}); name a file, or a glob such as '*.csv', to read it as records",
            file=sys.stderr,
        )
    return out, n_train


def holds_records(path: str, fmt: str, rules: RecordRules) -> bool:
    """Whether a file found in a folder is a record file with the fields: its first record is an object with them."""
    try:
        if fmt == "jsonl":  # its first line alone: the reader parses many at once, and a later bad one is an error
            with open(path, "rb") as f:
                first = next((line for line in f if line.strip()), b"null")
            record = json.loads(first)
            return isinstance(record, dict) and all(name in record for name in rules.fields)
        with contextlib.closing(records(path, fmt, rules)) as found:
            for _, record, _ in found:
                return isinstance(record, dict) and all(name in record for name in rules.fields)
    except (UserError, OSError, ValueError):
        return False
    return False  # no records at all


def _source(path: Path, name: str, documents: int) -> SourceFile:
    st = os.stat(path)
    return SourceFile(str(path), name, st.st_size, st.st_mtime_ns, documents)
