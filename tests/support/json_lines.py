"""Hostile JSON lines, as bytes, for the parser's differential test (tests/spark/test_line_parser.py): a seeded
generator that writes every value of every JSON type into every column of a schema, valid or not.

A line is written byte by byte, never by `json.dumps`, so that it can hold what encoders never write and users' files
do: numbers of every form (`1.50`, `-0`, `1E+2`, `01`, `NaN`, 40 digits), strings of numbers and times, escapes valid
and not, lone surrogates, invalid UTF-8, NUL and other control bytes, nested objects and arrays in scalar columns,
keys reordered, repeated, missing, extra or escaped (`"user\\u005fid"` is `user_id`), a byte-order mark, a top-level
array, trailing text, a truncated object, padding to any length (so that lines cross the line reader's buffers),
and lines ended by LF, CRLF or CR. Each column's values are weighted towards its own type, so that most lines parse
and the rows compared carry values, not nulls.

Why seeded and not hypothesis: each comparison is two Spark reads (about 0.6 s however few the lines), and hypothesis
spent 27 ms a line drawing these (4,000 draws for a file of 24 lines; measured), so a file per example gave a few
hundred lines a minute. This writes thousands of lines a second into files of hundreds, the seed names the file, and
the test names the first line that differs.
"""
from __future__ import annotations

import random
import re

from stateops.jobs.definition.schema_ddl import top_level_parts

JSON_NUMBERS = [
    b"0", b"-0", b"0.0", b"-0.0", b"1.50", b"1.5", b"1e2", b"1E+2", b"-1.0e-7", b"2.5E-3", b"1e400", b"-1e400",
    b"4.9e-325", b"123456789012345678901234567890", b"1234567890123456789012345678901234567890.5",
    b"9223372036854775807", b"9223372036854775808", b"-9223372036854775809", b"2147483647", b"2147483648", b"32768",
    b"128", b"-129", b"1735689600", b"1735689600000", b"0.1", b"100", b"42.0000",
]
NUMBER_FORMS = JSON_NUMBERS + [
    # not JSON numbers, each refused or read by one of Jackson's features as Spark sets them
    b"01", b"+1", b".5", b"5.", b"1e", b"--1", b"NaN", b"-NaN", b"Infinity", b"-Infinity", b"+Infinity", b"INF",
    b"+INF", b"-INF", b"0x1F", b"1_000",
]
TIMES_OF_2026 = [
    b"2026-01-01T00:10:05Z", b"2026-01-01T00:10:05.123Z", b"2026-01-01T00:10:05.123456789+02:00",
    b"2026-01-01T00:10:05.1234567Z", b"2026-01-01 00:10:05", b"2026-01-01", b"2026-01-01T00:10", b"2026-1-1",
    b"2026-01-01T00:10:05-08:00", b"2026-02-11T13:45:00.5Z", b"2026-01-01T00:10:05+0530",
]
TIMES = TIMES_OF_2026 + [
    b"2026-01-01T00:10:05 UTC", b"2026-13-01T00:00:00Z",
    b"2026-02-30T00:00:00Z", b"2026-01-01T24:00:00Z", b"1735689600", b"1735689600000", b"2099-01-01T00:00:00Z",
    b"0001-01-01T00:00:00Z", b"9999-12-31T23:59:59.999999Z", b"+10000-01-01T00:00:00Z", b" 2026-01-01T00:10:05Z ",
    b"T00:10:05", b"now", b"",
]
JSON_ESCAPES = [
    rb"\n", rb"\t", rb"\"", rb"\\", rb"\/", rb"\b", rb"\f", rb"\r", rb"\u00e9", rb"\u0000", rb"\u005f",
    rb"\ud83d\ude00", rb"\uDBFF\uDFFF",
]
ESCAPES = JSON_ESCAPES + [
    rb"\ud800", rb"\udc00x",  # lone surrogates
    rb"\u12", rb"\x41", rb"\'", rb"\a", rb"\U0001F600",  # not JSON escapes
]
RAW = [  # bytes as they stand in a line, inside a string or anywhere
    b"\x00", b"\x01", b"\x1f", b"\t", b"\x7f", b"\xff", b"\xfe", b"\xc3(", b"\xed\xa0\x80", b"\xc0\xaf", b"\xe2\x82",
    b"\xf0\x9f\x98\x80", b"\xf4\x90\x80\x80", "\u00e9".encode(), "\u6f22".encode(), "\u2028".encode(), b'"', b"\\",
]
PLAIN = ["", "a", "u1", "e-17", "click", "x y", "caf\u00e9", "\u6f22\u5b57", "\U0001f600", "0", "-", "null", "true",
         "{}", "[1]", "a,b", "k:v", "user_id", "\u00a0", "\ufeff"]
WS = [b"", b"", b"", b" ", b"  ", b"\t", b" \t "]
JSON_LITERALS = [b"true", b"false", b"null"]
LITERALS = JSON_LITERALS + [b"True", b"nul", b"undefined", b"tru"]
_SMALL = [b"0", b"-0", b"1", b"-1", b"42", b"127", b"-128", b"1000"]
_TIMES = [b'"' + t + b'"' for t in TIMES_OF_2026] + [b"1735689600"]
_REALS = JSON_NUMBERS[:10] + [b"0.1", b"100", b"42.0000", b"-273.15", b"1735689600"]
PLAIN_VALUES = {  # a plain record's values: each one its column's type reads (or one of its edge cases)
    **dict.fromkeys(("bigint", "int", "smallint", "tinyint"), _SMALL),
    **dict.fromkeys(("timestamp", "timestamp_ntz"), _TIMES),
    "date": [b'"2026-01-01"', b'"2026-02-11"', b'"2026-01-01T00:10:05Z"', b'"2026-1-1"'],
    **dict.fromkeys(("double", "float"), _REALS),
    "boolean": [b"true", b"false"],
    "binary": [b'"aGVsbG8="', b'""'],
    "decimal": [b"0", b"1.5", b"-2.25", b"1234.5678", b'"9.99"', b"1e2", b"0.00001"],
}
INTEGERS = {"bigint", "int", "smallint", "tinyint"}
BOM = b"\xef\xbb\xbf"
TAILS = [b" trailing", b"}", b",", b" {}", b"\x00", b"]"]
TERMINATORS = [b"\n", b"\n", b"\n", b"\r\n", b"\r"]


def _split_type(text: str) -> list[str]:
    """The top-level parts of a nested type's parameters (`lat:double,n:array<int>` -> two parts)."""
    return [p.strip() for p in top_level_parts(text) if p.strip()]


class Lines:
    """Lines over a schema's columns (name -> type as Spark prints it, as stateops.jobs.definition.schema_ddl reads
    them), drawn from `seed`."""

    def __init__(self, columns: dict[str, str], seed: int) -> None:
        self.columns = columns
        self.rng = random.Random(seed)
        self.hostile = True  # off while a record is drawn plain: its columns each once, each of its own type

    # --- scalars ---
    def number(self) -> bytes:
        rng = self.rng
        form = rng.randrange(6)
        if form == 0:
            return str(rng.randint(-(2 ** 70), 2 ** 70)).encode()
        if form == 1:
            return repr(rng.uniform(-1e6, 1e6) * 10.0 ** rng.randint(-300, 300)).encode()
        if form == 2:
            return ("%.17E" % rng.uniform(-1e3, 1e3)).encode()
        if form == 3:
            return (rng.choice([b"", b"-"]) + rng.choice([b"0", b"7", b"12", b"900719925474099312"])
                    + rng.choice([b"", b".0", b".5", b".25000", b".000000000000000000001"])
                    + rng.choice([b"", b"e0", b"E5", b"e-5", b"E+308", b"e-400"]))
        return rng.choice(NUMBER_FORMS if self.hostile else JSON_NUMBERS)

    def integer(self) -> bytes:
        rng = self.rng
        return str(rng.randint(-1000, 1000) if rng.random() < 0.5 else rng.randint(-(2 ** 63), 2 ** 63 - 1)).encode()

    def string(self, content: bytes | None = None) -> bytes:
        if content is None:
            rng = self.rng
            pieces = []
            for _ in range(rng.randrange(5)):
                pick = rng.randrange(8) if self.hostile else rng.choice([0, 1, 2, 3, 5, 6, 7])
                pieces.append(rng.choice(PLAIN).encode() if pick < 3
                              else rng.choice(ESCAPES if self.hostile else JSON_ESCAPES) if pick == 3
                              else rng.choice(RAW) if pick == 4 else rng.choice(NUMBER_FORMS) if pick == 5
                              else rng.choice(TIMES))
            content = b"".join(pieces)
        return b'"' + content + b'"'

    def scalar(self) -> bytes:
        pick = self.rng.randrange(3)
        return (self.string() if pick == 0 else self.number() if pick == 1
                else self.rng.choice(LITERALS if self.hostile else JSON_LITERALS))

    def any_json(self, depth: int = 0) -> bytes:
        """A value of any JSON type (or a near miss), nested up to three levels."""
        pick = self.rng.randrange(5) if depth < 3 else 0
        if pick == 3:
            return self.array(lambda: self.any_json(depth + 1))
        if pick == 4:
            return self.object([(self.string(), self.any_json(depth + 1)) for _ in range(self.rng.randrange(4))])
        return self.scalar()

    # --- containers ---
    def gap(self) -> bytes:
        return self.rng.choice(WS)

    def array(self, element) -> bytes:
        items = [self.gap() + element() for _ in range(self.rng.randrange(5))]
        return b"[" + b",".join(items) + self.gap() + b"]"

    def object(self, members: list[tuple[bytes, bytes]]) -> bytes:
        return b"{" + b",".join(self.gap() + k + self.gap() + b":" + self.gap() + v for k, v in members) + self.gap() + b"}"

    # --- typed ---
    def typed(self, kind: str) -> bytes:
        """A value of a column of type `kind`: mostly one of its own type, then null or a value of any JSON type."""
        rng = self.rng
        pick = rng.randrange(6) if self.hostile else 0
        if pick == 4:
            return b"null"
        if pick == 5:
            return self.any_json()
        if kind.startswith("struct<"):
            fields = {n.strip(): t.strip() for n, t in (p.split(":", 1) for p in _split_type(kind[7:-1]))}
            return self.record(fields)
        if kind.startswith("array<"):
            return self.array(lambda: self.typed(kind[6:-1]))
        if kind.startswith("map<"):
            value = _split_type(kind[4:-1])[1]
            return self.object([(self.string(), self.typed(value)) for _ in range(rng.randrange(4))])
        if not self.hostile and kind.split("(")[0] in PLAIN_VALUES:
            return rng.choice(PLAIN_VALUES[kind.split("(")[0]])
        if kind in ("timestamp", "timestamp_ntz", "date"):
            return (self.string(rng.choice(TIMES)) if rng.random() < 0.8
                    else rng.choice([b"1735689600", b"-1", b"0", b"1735689600.5", b"1e9"]))
        if kind in INTEGERS:
            pick = rng.randrange(4)
            return self.integer() if pick < 2 else self.number() if pick == 2 else self.string(self.integer())
        if kind.startswith("decimal") or kind in ("double", "float"):
            pick = rng.randrange(3)
            return self.number() if pick < 2 else self.string(rng.choice(NUMBER_FORMS))
        if kind == "boolean":
            return rng.choice([b"true", b"false", b'"true"', b"1", b"0"])
        if kind == "binary":
            return self.string(rng.choice([b"aGVsbG8=", b"aGVsbG8", b"!!"]))
        return self.string()  # string

    def key(self, name: str) -> bytes:
        """The key of column `name` as a line may spell it: plain, with an escape that decodes to it, or otherwise."""
        plain = name.encode()
        pick = self.rng.randrange(10) if self.hostile else 0
        if pick == 7:
            plain = plain.replace(b"_", rb"\u005f") if b"_" in plain else rb"\u00" + b"%02x" % plain[0] + plain[1:]
        elif pick == 8:
            plain = plain.upper()
        elif pick == 9:
            plain = plain + b" "
        return self.string(plain)

    def record(self, columns: dict[str, str] | None = None) -> bytes:
        """A JSON object over `columns` (default: the schema's): each column once (mostly), missing, twice, or null;
        extra keys; padding to any length now and then; in any order."""
        rng = self.rng
        top = columns is None
        if top:
            self.hostile = rng.random() < 0.6
        members = []
        for name, kind in (columns or self.columns).items():
            times = rng.choice([1, 1, 1, 1, 1, 1, 1, 0, 2]) if self.hostile else 1
            members += [(self.key(name), self.typed(kind)) for _ in range(times)]
        members += [(self.string(), self.any_json()) for _ in range(rng.choice([0, 0, 0, 1, 2]))]
        if top and rng.randrange(10) == 0:  # lines of every length, across the line reader's buffers
            members.append((b'"pad"', b'"' + b"x" * rng.choice([rng.randrange(200), rng.randrange(70_000)]) + b'"'))
        rng.shuffle(members)
        return self.object(members)

    # --- lines and files ---
    def line(self) -> bytes:
        """One line (no line break in it), as a file's line or a Kafka value: mostly an object over the columns,
        then the other things a line can be."""
        rng = self.rng
        pick = rng.randrange(16)
        if pick < 8:
            return self.record()
        if pick == 8:
            return self.array(lambda: self.record() if rng.random() < 0.7 else self.any_json())
        if pick == 9:
            return self.gap() + self.record()
        if pick == 10:
            return BOM + self.record()
        if pick == 11:
            return self.record() + rng.choice(TAILS)
        if pick == 12:
            whole = self.record()
            return whole[:rng.randrange(1, len(whole))]  # truncated
        if pick == 13:
            return self.any_json()
        if pick == 14:
            return self.gap()
        return bytes(rng.randrange(256) for _ in range(rng.randrange(30))).replace(b"\n", b"").replace(b"\r", b"")

    def file(self, lines: int) -> bytes:
        """A file of `lines` lines, each ended by LF, CRLF or CR, the last one perhaps not ended at all."""
        drawn = [self.line() + self.rng.choice(TERMINATORS) for _ in range(lines)]
        if drawn and self.rng.random() < 0.5:
            drawn[-1] = drawn[-1].rstrip(b"\r\n")
        return b"".join(drawn)


def hadoop_lines(data: bytes) -> list[bytes]:
    """The lines Hadoop's line reader (Spark's text and JSON file sources) reads from `data`: split at LF, CRLF or
    CR, no empty line after the last break."""
    pieces = re.split(rb"\r\n|\n|\r", data)
    return pieces[:-1] if pieces and pieces[-1] == b"" else pieces


def _event(n: int, **fields) -> bytes:
    """An event line with the fields given raw (bytes as they stand in the line) over plain defaults."""
    values = {"event_id": b'"h%d"' % n, "user_id": b'"u%d"' % (n % 7), "event_time": b'"2026-01-01T00:%02d:05Z"' % (n % 60),
              "action": b'"click"', "value": b"%d.5" % (n % 10)}
    values.update(fields)
    return b"{" + b", ".join(b'"' + k.encode() + b'": ' + v for k, v in values.items() if v is not None) + b"}"


def hostile_corpus() -> list[bytes]:
    """Lines of the events input a user's landing zone holds when something upstream goes wrong, each unique by its
    event id (duplicates kept identical, so that which one a dedup keeps does not matter): numbers, booleans and
    nested values in string columns, strings in number columns, epoch and odd times, a poison time, invalid UTF-8,
    NUL and control bytes, escapes and nested quotes, keys escaped, repeated or missing, arrays, a byte-order mark,
    trailing text, truncated lines, blank lines, and a 2 MB line (files only: above Kafka's 1 MB record limit)."""
    in_string = [b"4242", b"-0", b"1.50", b"1e3", b"12345678901234567890123", b"true", b"false", b'{"a": 1}', b"[1, 2]",
                 b'{"nested": {"deep": [true, null, "x"]}}', b"NaN", b"Infinity"]
    in_number = [b'"1.5"', b'"abc"', b'"NaN"', b'"Infinity"', b'"-Infinity"', b"1e400", b"-0.0", b"01", b"+1", b".5",
                 b"true", b"[1]", b'{"v": 1}', b"123456789012345678901234567890"]
    times = [b"1767225605", b"1767225605000", b"-1", b'"2026-01-01 00:10:05"', b'"2026-01-01"', b'"2026-01-01T00:10"',
             b'"2026-01-01T01:10:05+01:00"', b'"2026-01-01T00:10:05.123456789Z"', b'"2026-13-01T00:00:00Z"',
             b'"2099-01-01T00:00:00Z"', b'"9999-12-31T23:59:59Z"', b'"not a time"', b"true", b"1767225605.5"]
    texts = [b'"a\\"b"', b'"a"b"', b'"caf\xc3\xa9"', b'"v\xff"', b'"\xc3("', b'"\xed\xa0\x80"', b'"\xc0\xaf"',
             b'"nul\x00byte"', b'"nul\\u0000escaped"', b'"tab\tinside"', b'"\\ud83d\\ude00"', b'"\\ud800"',
             b'"\\x41"', b'"line\\nbreak"', b'"\\u2028"', b'"' + "\u6f22".encode() + b'"']
    lines, n = [], 0
    for column, values in (("user_id", in_string), ("event_id", in_string), ("action", in_string),
                           ("value", in_number), ("event_time", times), ("user_id", texts), ("action", texts)):
        for value in values:
            n += 1
            lines.append(_event(n, **{column: value}))
    for n in range(n + 1, n + 9):  # keys: escaped, repeated (the last one counts), missing, extra, upper case
        lines += [_event(n).replace(b'"user_id"', b'"user\\u005fid"'),
                  _event(n + 100).replace(b'{', b'{"user_id": "first", ', 1),
                  _event(n + 200, value=None), _event(n + 300).replace(b"}", b', "extra": {"x": [1, 2]}}'),
                  _event(n + 400).replace(b'"user_id"', b'"USER_ID"')]
    lines += [
        # issue 69's three lines: a number in a string column, a plain line, an array of one event
        b'{"event_id": "e1", "user_id": 4242, "event_time": "2026-01-01T00:10:05Z", "action": "click", "value": 1.5}',
        b'{"event_id": "e2", "user_id": "u1", "event_time": "2026-01-01T00:10:06Z", "action": "click", "value": 2.5}',
        b'[{"event_id": "e3", "user_id": "x-array", "event_time": "2026-01-01T00:10:07Z", "action": "v", "value": 1.0}]',
        b"[" + _event(901) + b", " + _event(902) + b"]", b"[" + _event(903) + b', {"event_id": "x"}]', b"[]",
        b"[[" + _event(904) + b"]]", b"\xef\xbb\xbf" + _event(905), _event(906) + b" trailing", _event(907) + b"}",
        _event(908)[:40], _event(909)[:-1], b"", b"   ", b"null", b"12", b'"a string"', b"\x00\x00", b"\xff\xfe\xfd",
        _event(910), _event(910),  # a duplicate, identical
        _event(911, user_id=b"4242"), _event(912, user_id=b'"4242"'),  # a number and its text: one user
        _event(913, action=b'"' + b"y" * 2_000_000 + b'"'),  # 2 MB
        _event(914)[:25],  # truncated: the file's last line, with no line break after it
    ]
    return lines
