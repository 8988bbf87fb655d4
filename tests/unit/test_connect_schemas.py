"""The kept Connect schemas of a build table (lakehouse.dimension.connect_schemas), without
Spark: files named by their hash, read back only when whole, and the property's replay rule."""

from __future__ import annotations

import json
import uuid
from pathlib import Path

from lakehouse.dimension import connect_schemas


def _text() -> str:
    # a text no other test stored: loaded texts are kept per process by their hash
    return json.dumps({"type": "struct", "name": uuid.uuid4().hex, "fields": []})


def test_a_stored_schema_loads_by_its_hash_and_storing_it_again_writes_nothing(tmp_path):
    uri, text = str(tmp_path / "rates"), _text()
    hashes = connect_schemas.store(uri, {"public.rates": text})
    assert hashes == {"public.rates": connect_schemas.schema_hash(text)}
    kept = Path(uri) / connect_schemas.SCHEMA_DIR / f"{hashes['public.rates']}.json"
    before = kept.stat().st_mtime_ns
    assert connect_schemas.store(uri, {"public.rates": text}) == hashes
    assert kept.stat().st_mtime_ns == before
    assert connect_schemas.load(uri, hashes) == {"public.rates": text}
    # read once per process: the same hash names the same text wherever it is kept
    kept.unlink()
    assert connect_schemas.load(uri, hashes) == {"public.rates": text}


def test_a_torn_or_missing_schema_file_leaves_its_table_out(tmp_path):
    uri, text = str(tmp_path / "rates"), _text()
    digest = connect_schemas.schema_hash(text)
    folder = Path(uri) / connect_schemas.SCHEMA_DIR
    folder.mkdir(parents=True)
    (folder / f"{digest}.json").write_text(text[: len(text) // 2])
    assert connect_schemas.load(uri, {"public.rates": digest, "public.fees": "0" * 64}) == {}


def test_a_replay_of_the_batch_that_set_the_property_starts_from_before_it():
    recorded = connect_schemas.Recorded.parse(
        connect_schemas.decide(connect_schemas.Recorded(), 7, {"public.rates": "b"})
    )
    assert recorded.start(7) == {} and recorded.start(8) == {"public.rates": "b"}
    assert (
        connect_schemas.decide(recorded, 7, {"public.rates": "b"}) is None
    )  # the replay sets it again: no
    assert connect_schemas.Recorded.parse("not json") == connect_schemas.Recorded()
